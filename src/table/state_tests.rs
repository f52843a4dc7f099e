//! `state_in` and `state_out`, the carried state per piece, on a table worked out by hand.

use super::*;

// A lanes batch of 4 rows of 4 steps:
// row 0: steps 2..5 of sequence 10 (9 steps): continues from the previous batch, cut at the row's
//        end, so it goes on in the next batch;
// row 1: step 3 of sequence 11 (4 steps), continued and ending mid-row; then sequence 12 whole
//        (3 steps), ending exactly at the row's end;
// row 2: padding only;
// row 3: sequence 13 whole (2 steps), then steps 0..1 of sequence 14 (5 steps), cut at the end.
#[rustfmt::skip]
const LANES: [i64; 30] = [
    0, 0, 4, 10, 2, 9,
    1, 0, 1, 11, 3, 4,
    1, 1, 3, 12, 0, 3,
    3, 0, 2, 13, 0, 2,
    3, 2, 2, 14, 0, 5,
];

fn tables(carry: bool) -> StepTables {
    BlockTable::with_carry(&LANES, 4, 4, carry)
        .unwrap()
        .step_tables(8)
}

#[test]
fn a_continuing_piece_takes_its_rows_state_and_a_cut_one_gives_it() {
    let lanes = tables(true);
    // Pieces in cu_seqlens order: the continuing ones (rows 0 and 1) read their row's state.
    assert_eq!(lanes.cu_seqlens, [0, 4, 5, 8, 10, 12]);
    assert_eq!(lanes.state_in, [0, 1, -1, -1, -1]);
    // Row 0's piece goes on next batch (the same piece both reads and gives the state); row 1's
    // sequence ends exactly at the row's end and row 2 is padding, so nothing reads their state
    // again; row 3's last piece, cut, gives its state.
    assert_eq!(lanes.state_out, [0, -1, -1, 4]);
    // A row's lane state is read next batch exactly where the next batch carries it.
    assert_eq!(lanes.carry, [true, true, false, false]);
}

#[test]
fn without_carried_state_every_piece_starts_from_zeros_and_no_lane_keeps_one() {
    let packed = tables(false);
    assert_eq!(packed.state_in, [-1; 5]);
    assert_eq!(packed.state_out, [-1; 4]);
}

#[test]
fn a_batch_of_no_piece_keeps_every_lane() {
    let empty = BlockTable::with_carry(&[], 2, 4, true)
        .unwrap()
        .step_tables(0);
    assert!(empty.state_in.is_empty());
    assert_eq!(empty.state_out, [-1, -1]);
}

#[test]
fn the_state_buffers_are_checked_like_the_others() {
    let table = BlockTable::with_carry(&LANES, 4, 4, true).unwrap();
    let mut tables = table.step_tables(0);
    let mut short = [0i64; 3];
    let mut out = tables.as_mut();
    out.state_out = &mut short;
    let error = table.write_batch(0, out).unwrap_err().to_string();
    assert_eq!(
        error,
        "state_out = 3 values: expected 4 values, [blocks] of a batch of 4 blocks of 4 steps and \
         5 pieces"
    );
    let mut tables = table.step_tables(0);
    let mut long = [0i64; 6];
    let mut out = tables.as_mut();
    out.state_in = &mut long;
    let error = table.write_batch(0, out).unwrap_err().to_string();
    assert!(
        error.starts_with("state_in = 6 values: expected 5 values, [pieces]"),
        "{error}"
    );
}

#[test]
fn the_fields_are_declared_in_the_core_with_their_shapes() {
    assert_eq!(BatchField::StateIn.name(), "state_in");
    assert_eq!(BatchField::StateIn.shape(), FieldShape::Pieces);
    assert_eq!(BatchField::StateOut.shape(), FieldShape::Blocks);
    assert_eq!(BatchField::StateOut.dtype(), FieldDtype::Int64);
    assert!(BatchField::FROM_TABLE.contains(&BatchField::StateIn));
    assert!(BatchField::FROM_TABLE.contains(&BatchField::StateOut));
}
