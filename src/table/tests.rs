//! The block table's checks and per-step tables, on a table worked out by hand.

use super::*;

// Block 0: sequence 5 (3 steps), then sequence 1 (2 steps), then 1 step of padding.
// Block 1: steps 2..5 of sequence 7 (6 steps, split), then 2 steps of padding.
#[rustfmt::skip]
const TABLE: [i64; 18] = [
    0, 0, 3, 5, 0, 3,
    0, 3, 2, 1, 0, 2,
    1, 0, 4, 7, 2, 6,
];

fn with_cell(row: usize, column: Column, value: i64) -> Vec<i64> {
    let mut cells = TABLE.to_vec();
    cells[row * Column::COUNT + column as usize] = value;
    cells
}

#[test]
fn columns_are_in_their_declared_order() {
    for (index, column) in Column::ALL.into_iter().enumerate() {
        assert_eq!(column as usize, index);
    }
    let names: Vec<_> = Column::ALL.map(Column::name).into();
    assert_eq!(
        names,
        [
            "block",
            "block_offset",
            "length",
            "sequence",
            "offset",
            "sequence_length"
        ]
    );
}

#[test]
fn step_tables_by_hand() {
    let tables = BlockTable::new(&TABLE, 2, 6).unwrap().step_tables(0);
    let bools = |v: &[bool]| v.iter().map(|&b| u8::from(b)).collect::<Vec<_>>();
    assert_eq!(bools(&tables.reset), [1, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0]);
    assert_eq!(bools(&tables.valid), [1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 0, 0]);
    assert_eq!(tables.segment_ids, [0, 0, 0, 1, 1, -1, 0, 0, 0, 0, -1, -1]);
    assert_eq!(tables.position_ids, [0, 1, 2, 0, 1, 0, 2, 3, 4, 5, 0, 0]);
    assert_eq!(tables.cu_seqlens, [0, 3, 5, 9]);
    assert_eq!(tables.indices, [5, 1, 7]);
    let mut cu = [0; 4];
    write_cu_seqlens(&TABLE, &mut cu).unwrap();
    assert_eq!(cu, [0, 3, 5, 9]);
}

#[test]
fn carried_state_resets_only_where_sequences_start() {
    // TABLE's block 1 continues sequence 7 at its first step: carried, it does not reset there.
    let bools = |v: &[bool]| v.iter().map(|&b| u8::from(b)).collect::<Vec<_>>();
    let packed = BlockTable::new(&TABLE, 2, 6).unwrap().step_tables(0);
    assert_eq!(bools(&packed.carry), [0, 0]);
    let lanes = BlockTable::with_carry(&TABLE, 2, 6, true)
        .unwrap()
        .step_tables(4);
    assert_eq!(bools(&lanes.reset), [1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(bools(&lanes.carry), [0, 1]);
    assert_eq!(lanes.lanes, [4, 5]);
    // Sequence 5 and 1 end in block 0; sequence 7 (6 steps) ends at its step 5, block 1's fourth.
    let ends = [0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0];
    assert_eq!(bools(&packed.ends), ends);
    assert_eq!(bools(&lanes.ends), ends);
    // A piece that continues its sequence inside a block has no carried state to go on from.
    let mut inside = TABLE.to_vec();
    inside[Column::Offset as usize + Column::COUNT] = 1;
    inside[Column::SequenceLength as usize + Column::COUNT] = 3;
    let err = BlockTable::with_carry(&inside, 2, 6, true).unwrap_err();
    assert_eq!(err.argument, "table[1, offset]");
    assert!(BlockTable::new(&inside, 2, 6).is_ok());
}

#[test]
fn an_empty_table_is_all_padding() {
    let tables = BlockTable::new(&[], 2, 3).unwrap().step_tables(0);
    assert!(tables.valid.iter().all(|&v| !v));
    assert_eq!(tables.segment_ids, [-1; 6]);
    assert_eq!(tables.cu_seqlens, [0]);
}

fn message(result: Result<impl std::fmt::Debug>) -> String {
    result.unwrap_err().to_string()
}

#[test]
fn bad_tables_name_the_cell() {
    for (cells, blocks, expected) in [
        (TABLE.to_vec(), 1, "table[2, block] = 1: expected a block from 0 to 0"),
        (
            with_cell(0, Column::Length, 9),
            2,
            "table[0, length] = 9: expected from 1 to t_max - block_offset = 6",
        ),
        (
            with_cell(1, Column::BlockOffset, 2),
            2,
            "table[1, block_offset] = 2: expected from 3 to t_max - 1 = 5 (pieces of a block in order, not overlapping)",
        ),
        (
            with_cell(2, Column::SequenceLength, 5),
            2,
            "table[2, sequence_length] = 5: expected at least offset + length = 6",
        ),
        (
            with_cell(2, Column::Block, 0),
            2,
            "table[2, block_offset] = 0: expected from 5 to t_max - 1 = 5 (pieces of a block in order, not overlapping)",
        ),
        (
            // Past the block's end: the block_offset is named, not the length it leaves no room for.
            with_cell(0, Column::BlockOffset, i64::MAX),
            2,
            "table[0, block_offset] = 9223372036854775807: expected from 0 to t_max - 1 = 5 (pieces of a block in order, not overlapping)",
        ),
        (with_cell(1, Column::Block, -1), 2, "table[1, block] = -1: expected a block from 0 to 1"),
        (
            with_cell(1, Column::Sequence, -4),
            2,
            "table[1, sequence] = -4: expected a dataset index of at least 0",
        ),
        (with_cell(0, Column::Offset, -1), 2, "table[0, offset] = -1: expected at least 0"),
        (TABLE[..7].to_vec(), 2, "table = 7 cells: expected rows of 6 cells"),
    ] {
        assert_eq!(message(BlockTable::new(&cells, blocks, 6)), expected);
    }
    let mut unsorted = TABLE.to_vec();
    unsorted.rotate_left(Column::COUNT * 2);
    assert_eq!(
        message(BlockTable::new(&unsorted, 2, 6)),
        "table[1, block] = 0: expected rows sorted by block (the previous row is in block 1)"
    );
}

#[test]
fn positions_cannot_overflow() {
    // A piece near the end of i64: its positions would wrap to negative numbers.
    let cells = with_cell(0, Column::Offset, i64::MAX - 1);
    assert_eq!(
        message(BlockTable::new(&cells, 2, 6)),
        format!(
            "table[0, offset] = {}: expected at most {} (2^63 - 1 - length)",
            i64::MAX - 1,
            i64::MAX - 3
        )
    );
}

#[test]
fn bad_batch_shapes_are_named() {
    assert_eq!(
        message(check_batch_shape(0, 6)),
        "blocks = 0: expected at least 1 block"
    );
    assert_eq!(
        message(check_batch_shape(2, -3)),
        "t_max = -3: expected at least 1 step per block"
    );
    assert!(message(check_batch_shape(1 << 16, 1 << 16))
        .starts_with("blocks * t_max = 65536 * 65536: expected at most 2147483647 steps"));
}

#[test]
fn buffers_of_the_wrong_size_are_refused() {
    let table = BlockTable::new(&TABLE, 2, 6).unwrap();
    assert_eq!(
        message(table.write_reset_mask(&mut [false; 11])),
        "reset = 11 values: expected 12 values, blocks * t_max = 2 * 6"
    );
    assert_eq!(
        message(write_cu_seqlens(&TABLE, &mut [0; 3])),
        "cu_seqlens = 3 values: expected 4 values, one more than the table's rows"
    );
    assert_eq!(
        message(write_cu_seqlens(
            &with_cell(0, Column::Length, 0),
            &mut [0; 4]
        )),
        "table[0, length] = 0: expected at least 1"
    );
}

#[test]
fn one_pass_writes_what_each_table_writer_writes() {
    for carry in [false, true] {
        let table = BlockTable::with_carry(&TABLE, 2, 6, carry).unwrap();
        let tables = table.step_tables(3);
        let (mut reset, mut valid, mut ends, mut carried) =
            ([false; 12], [false; 12], [false; 12], [false; 2]);
        let (mut segments, mut positions, mut cu) = ([0; 12], [0; 12], [0; 4]);
        table.write_reset_mask(&mut reset).unwrap();
        table.write_valid_mask(&mut valid).unwrap();
        table.write_end_mask(&mut ends).unwrap();
        table.write_carry_mask(&mut carried).unwrap();
        table.write_segment_ids(&mut segments).unwrap();
        table.write_position_ids(&mut positions).unwrap();
        write_cu_seqlens(&TABLE, &mut cu).unwrap();
        assert_eq!(tables.reset, reset);
        assert_eq!(tables.valid, valid);
        assert_eq!(tables.ends, ends);
        assert_eq!(tables.carry, carried);
        assert_eq!(tables.segment_ids, segments);
        assert_eq!(tables.position_ids, positions);
        assert_eq!(tables.cu_seqlens, cu);
        assert_eq!(tables.indices, [5, 1, 7]);
        assert_eq!(tables.lanes, [3, 4]);
    }
}

#[test]
fn the_one_pass_names_a_buffer_of_the_wrong_size_and_a_bad_first_lane() {
    let table = BlockTable::new(&TABLE, 2, 6).unwrap();
    let mut tables = table.step_tables(0);
    let mut short = [0i64; 2];
    let out = BatchTablesMut {
        reset: &mut tables.reset,
        valid: &mut tables.valid,
        ends: &mut tables.ends,
        carry: &mut tables.carry,
        lanes: &mut tables.lanes,
        segment_ids: &mut tables.segment_ids,
        position_ids: &mut tables.position_ids,
        cu_seqlens: &mut tables.cu_seqlens,
        indices: &mut short,
        state_in: &mut tables.state_in,
        state_out: &mut tables.state_out,
        document_ids: &mut tables.document_ids,
        cu_seqlens_padded: &mut tables.cu_seqlens_padded,
    };
    assert_eq!(
        message(table.write_batch(0, out)),
        "indices = 2 values: expected 3 values, [pieces] of a batch of 2 blocks of 6 steps and 3 \
         pieces"
    );
    let mut tables = table.step_tables(0);
    let out = tables.as_mut();
    assert_eq!(
        message(table.write_batch(i64::MAX, out)),
        format!(
            "first_lane = {}: expected from 0 to {} (the lane of the batch's first row)",
            i64::MAX,
            i64::MAX - 1
        )
    );
}

#[test]
fn the_batch_is_declared_once_with_every_table_field_after_the_loaded_ones() {
    let names: Vec<_> = BatchField::ALL.iter().map(|f| f.name()).collect();
    assert_eq!(names, BATCH_FIELD_NAMES);
    let from_table: Vec<_> = BatchField::ALL
        .into_iter()
        .filter(|f| f.from_table())
        .collect();
    assert_eq!(from_table, BatchField::FROM_TABLE);
    assert!(same_names(&BATCH_FIELD_NAMES, &names));
    assert!(!same_names(
        &BATCH_FIELD_NAMES[1..],
        &names[1..names.len() - 1]
    ));
    assert!(!same_names(&["data"], &["date"]));
}

#[test]
fn the_field_indexed_buffers_are_checked_against_the_declaration() {
    let table = BlockTable::new(&TABLE, 2, 6).unwrap();
    let mut expected = table.step_tables(0);
    let mut tables = table.step_tables(9);
    let buffers = tables.as_mut().into_buffers();
    table
        .write_batch(0, BatchTablesMut::from_buffers(buffers).unwrap())
        .unwrap();
    assert_eq!(tables, expected);
    let mut buffers = expected.as_mut().into_buffers();
    let mut wrong = [0i32; 3];
    buffers[8] = FieldBuffer::Int32(&mut wrong); // indices are int64
    assert_eq!(
        message(BatchTablesMut::from_buffers(buffers).map(drop)),
        "indices = a buffer of int32: expected a buffer of int64 (the core's declaration)"
    );
    let mut buffers = expected.as_mut().into_buffers();
    buffers.pop();
    assert_eq!(
        message(BatchTablesMut::from_buffers(buffers).map(drop)),
        "buffers = 12 buffers: expected 13 buffers, one per field written from the table"
    );
}

#[test]
fn every_shape_rule_gives_the_dimensions_the_writers_use() {
    for (blocks, t_max, pieces) in [(1, 1, 0), (2, 6, 3), (7, 5, 11)] {
        assert_eq!(
            FieldShape::Segments.dims(blocks, t_max, pieces),
            [padded_segments_bound(blocks, pieces)]
        );
        assert_eq!(
            FieldShape::TableRows.dims(blocks, t_max, pieces),
            [pieces, Column::COUNT]
        );
        assert_eq!(
            FieldShape::StepTable.dims(blocks, t_max, pieces),
            [blocks, t_max]
        );
        assert_eq!(
            FieldShape::PiecesPlusOne.dims(blocks, t_max, pieces),
            [pieces + 1]
        );
    }
}
