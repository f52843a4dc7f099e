//! The per-step tables and attention views the bridge writes for the operators, from one block
//! table: their order, their values and the names of what the core does not know.

use super::*;
use crate::ffi::TableBuffer;

#[test]
fn the_batch_tables_come_in_the_cores_order_from_one_call() {
    // Block 0: sequence 3 whole (2 steps) then padding; block 1: padding only.
    let table = [0, 0, 2, 3, 0, 2];
    let (mut reset, mut valid, mut ends, mut carry) =
        ([false; 6], [false; 6], [false; 6], [false; 2]);
    let (mut lanes, mut segments, mut positions, mut cu, mut indices) =
        ([0i64; 2], [0i32; 6], [0i64; 6], [0i32; 2], [0i64; 1]);
    let (mut state_in, mut state_out) = ([0i64; 1], [0i64; 2]);
    let (mut documents, mut padded) = ([0i32; 6], [0i32; 5]);
    let mut out = vec![
        buffer(&mut reset),
        buffer(&mut valid),
        buffer(&mut ends),
        buffer(&mut carry),
        buffer(&mut lanes),
        buffer(&mut segments),
        buffer(&mut positions),
        buffer(&mut cu),
        buffer(&mut indices),
        buffer(&mut state_in),
        buffer(&mut state_out),
        buffer(&mut documents),
        buffer(&mut padded),
    ];
    // SAFETY: each buffer is an array of this test's, of its field's dtype.
    unsafe { write_batch_tables(&table, 2, 3, false, 6, "sequence", &out) }.unwrap();
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
    let declared = bload::BatchField::FROM_TABLE.map(bload::BatchField::name);
    assert_eq!(names, declared);
    let mut long = [0i32; 3];
    out[7] = buffer(&mut long);
    // SAFETY: as above.
    let message = unsafe { write_batch_tables(&table, 2, 3, false, 6, "sequence", &out) }
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
    // The positions' name is checked before any buffer.
    // SAFETY: no buffer.
    let message = unsafe { write_batch_tables(&table, 2, 3, false, 0, "token", &[]) }
        .unwrap_err()
        .to_string();
    assert!(
        message.starts_with("positions = \"token\": expected"),
        "{message}"
    );
}

#[test]
fn buffers_that_do_not_fit_their_fields_are_refused_by_name() {
    let table = [0i64, 0, 2, 3, 0, 2];
    // SAFETY: no buffer is written: the count is checked first.
    let message = unsafe { write_batch_tables(&table, 2, 3, false, 0, "sequence", &[]) }
        .unwrap_err()
        .to_string();
    assert_eq!(
        message,
        "buffers = 0 buffers: expected 13 buffers, one per field written from the table"
    );
    let mut odd = [0u8; 3];
    let mut out: Vec<_> = (0..13).map(|_| buffer(&mut [0u8; 0])).collect();
    out[4] = buffer(&mut odd); // lanes are int64: 3 bytes are no whole number of them
                               // SAFETY: no buffer is written: lanes' size is checked before the table.
    let message = unsafe { write_batch_tables(&table, 2, 3, false, 0, "sequence", &out) }
        .unwrap_err()
        .to_string();
    assert_eq!(
        message,
        "lanes = 3 bytes: expected a whole number of int64 values of 8 bytes"
    );
}

/// A test array's memory as the operator hands a tensor's in.
fn buffer<T>(values: &mut [T]) -> TableBuffer {
    TableBuffer {
        address: values.as_mut_ptr() as usize,
        bytes: std::mem::size_of_val(values),
    }
}
