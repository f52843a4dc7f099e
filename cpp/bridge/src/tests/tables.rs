//! The per-step tables and attention views the bridge writes for the operators, from one block
//! table: their order, their values and the names of what the core does not know.

use super::*;

#[test]
fn the_batch_tables_come_in_the_cores_order_from_one_call() {
    // Block 0: sequence 3 whole (2 steps) then padding; block 1: padding only.
    let table = [0, 0, 2, 3, 0, 2];
    let (mut reset, mut valid, mut ends, mut carry) =
        ([false; 6], [false; 6], [false; 6], [false; 2]);
    let (mut lanes, mut segments, mut positions, mut cu, mut indices) =
        ([0; 2], [0; 6], [0; 6], [0; 2], [0; 1]);
    let (mut state_in, mut state_out) = ([0; 1], [0; 2]);
    let (mut documents, mut padded) = ([0; 6], [0; 5]);
    write_batch_tables(
        &table,
        2,
        3,
        false,
        6,
        "sequence",
        &mut reset,
        &mut valid,
        &mut ends,
        &mut carry,
        &mut lanes,
        &mut segments,
        &mut positions,
        &mut cu,
        &mut indices,
        &mut state_in,
        &mut state_out,
        &mut documents,
        &mut padded,
    )
    .unwrap();
    assert_eq!(valid, [true, true, false, false, false, false]);
    assert_eq!(lanes, [6, 7]);
    assert_eq!(cu, [0, 2]);
    assert_eq!(indices, [3]);
    assert_eq!((state_in, state_out), ([-1], [-1, -1]));
    let names: Vec<_> = batch_fields()
        .into_iter()
        .filter(|f| f.from_table)
        .map(|f| f.name)
        .collect();
    assert_eq!(
        names,
        [
            "reset",
            "valid",
            "ends",
            "carry",
            "lanes",
            "segment_ids",
            "position_ids",
            "cu_seqlens",
            "indices",
            "state_in",
            "state_out",
            "document_ids",
            "cu_seqlens_padded"
        ]
    );
    let message = write_batch_tables(
        &table,
        2,
        3,
        false,
        6,
        "sequence",
        &mut reset,
        &mut valid,
        &mut ends,
        &mut carry,
        &mut lanes,
        &mut segments,
        &mut positions,
        &mut [0; 3],
        &mut indices,
        &mut state_in,
        &mut state_out,
        &mut documents,
        &mut padded,
    )
    .unwrap_err()
    .to_string();
    assert!(
        message.starts_with("cu_seqlens = 3 values: expected 2 values"),
        "{message}"
    );
}

#[test]
fn attention_views_of_a_table_and_a_positions_name_the_core_does_not_know() {
    // One piece of 2 steps in the first of 2 blocks of 3.
    let table = [0i64, 0, 2, 3, 0, 2];
    assert_eq!(max_seqlen(&table, 2, 3).unwrap(), 2);
    let mut mask = [false; 18];
    write_attention_mask(&table, 2, 3, true, &mut mask).unwrap();
    assert_eq!(
        &mask[..9],
        [true, false, false, true, true, false, false, false, true]
    );
    let (mut num, mut idx, mut full_num, mut full_idx) = ([0; 6], [0; 18], [0; 6], [0; 18]);
    write_kv_blocks(
        &table,
        2,
        3,
        1,
        false,
        &mut num,
        &mut idx,
        &mut full_num,
        &mut full_idx,
    )
    .unwrap();
    assert_eq!(full_num, [2, 2, 1, 3, 3, 3]);
    let (mut reset, mut valid, mut ends, mut carry) =
        ([false; 6], [false; 6], [false; 6], [false; 2]);
    let message = write_batch_tables(
        &table,
        2,
        3,
        false,
        0,
        "token",
        &mut reset,
        &mut valid,
        &mut ends,
        &mut carry,
        &mut [0; 2],
        &mut [0; 6],
        &mut [0; 6],
        &mut [0; 2],
        &mut [0; 1],
        &mut [0; 1],
        &mut [0; 2],
        &mut [0; 6],
        &mut [0; 5],
    )
    .unwrap_err()
    .to_string();
    assert!(
        message.starts_with("positions = \"token\": expected"),
        "{message}"
    );
}
