//! Block tables and the per-step tables derived from them: the one implementation behind the
//! plugin's operators (through the cxx bridge), the C++ and tch datasets, and the CLI.
//!
//! A block table describes one batch of `blocks` blocks of `t_max` steps: one row of
//! [`Column::COUNT`] int64 cells per piece, in block order and in step order inside a block.
//! Rows arrive from outside (a tensor a user built or edited), so [`BlockTable::new`] checks
//! every cell before anything is written, and every error names the cell. The per-step tables
//! are the forms that recurrent models (the reset mask), flash-attention's varlen kernels
//! (`cu_seqlens`) and Mamba-style kernels (`seq_idx`, here the segment ids) consume; each is
//! `[blocks, t_max]`, row-major.

use crate::error::{Error, Result};

/// Columns of a block table row, in order. The C++ API (through the bridge's shared enum), the
/// Python package and `bload::tch` all index rows by these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Column {
    /// The block of the batch the piece lies in, from 0.
    Block = 0,
    /// The piece's first step in that block.
    BlockOffset = 1,
    /// Steps in the piece.
    Length = 2,
    /// The piece's sequence: its index in the dataset.
    Sequence = 3,
    /// Where the piece starts in its sequence (not 0 only for pieces of split sequences).
    Offset = 4,
    /// Steps of the whole sequence, so that a loader can check the dataset against the plan.
    SequenceLength = 5,
}

/// One row of a block table: a cell per [`Column`].
pub type TableRow = [i64; Column::COUNT];

impl Column {
    pub const COUNT: usize = 6;
    pub const ALL: [Column; Column::COUNT] = [
        Column::Block,
        Column::BlockOffset,
        Column::Length,
        Column::Sequence,
        Column::Offset,
        Column::SequenceLength,
    ];

    /// The column's name, as error messages and the Python package spell it.
    pub fn name(self) -> &'static str {
        match self {
            Column::Block => "block",
            Column::BlockOffset => "block_offset",
            Column::Length => "length",
            Column::Sequence => "sequence",
            Column::Offset => "offset",
            Column::SequenceLength => "sequence_length",
        }
    }

    /// This column's cell of `row`.
    pub fn of(self, row: &TableRow) -> i64 {
        row[self as usize]
    }
}

/// Largest number of steps in one batch: `cu_seqlens` and segment ids are int32.
pub const MAX_BATCH_STEPS: i64 = i32::MAX as i64;

/// A checked block table of a batch `[blocks, t_max]`.
#[derive(Debug, Clone, Copy)]
pub struct BlockTable<'a> {
    /// Row-major, whole rows (checked).
    cells: &'a [i64],
    blocks: usize,
    t_max: usize,
    /// Each block is a row whose recurrent state carries over from the previous batch (the
    /// `lanes` policy): a piece that continues its sequence at the start of its block goes on
    /// from that state instead of resetting.
    carry: bool,
    /// What `position_ids` count from (see [`Positions`]).
    positions: Positions,
}

impl<'a> BlockTable<'a> {
    /// Checks `cells`, a row-major table of [`Column::COUNT`] cells per row, as the table of a
    /// batch of `blocks` blocks of `t_max` steps: rows sorted by block, pieces of a block in step
    /// order without overlap, each inside its block and inside its sequence.
    pub fn new(cells: &'a [i64], blocks: i64, t_max: i64) -> Result<Self> {
        Self::with_carry(cells, blocks, t_max, false)
    }

    /// [`BlockTable::new`], for a batch whose rows carry their state from the previous batch
    /// when `carry` (the `lanes` policy's batches): then a piece may continue its sequence (an
    /// `offset` above 0) only at the start of its block, where the state it goes on from is.
    pub fn with_carry(cells: &'a [i64], blocks: i64, t_max: i64, carry: bool) -> Result<Self> {
        check_batch_shape(blocks, t_max)?;
        check_whole_rows(cells)?;
        let (mut previous_block, mut previous_end) = (-1i64, 0i64);
        for (row, cell) in rows_of(cells).enumerate() {
            let fail = |column: Column, expected: String| {
                let name = format!("table[{row}, {}]", column.name());
                Err(Error::invalid(name, column.of(cell), expected))
            };
            let block = Column::Block.of(cell);
            let start = Column::BlockOffset.of(cell);
            let length = Column::Length.of(cell);
            let offset = Column::Offset.of(cell);
            if block < 0 || block >= blocks {
                return fail(Column::Block, format!("a block from 0 to {}", blocks - 1));
            }
            if block < previous_block {
                let expected =
                    format!("rows sorted by block (the previous row is in block {previous_block})");
                return fail(Column::Block, expected);
            }
            if block != previous_block {
                previous_end = 0;
            }
            if start < previous_end || start >= t_max {
                let expected = format!(
                    "from {previous_end} to t_max - 1 = {} (pieces of a block in order, not \
                     overlapping)",
                    t_max - 1
                );
                return fail(Column::BlockOffset, expected);
            }
            // 0 <= start < t_max here, so t_max - start is at least 1.
            if length < 1 || length > t_max - start {
                let expected = format!("from 1 to t_max - block_offset = {}", t_max - start);
                return fail(Column::Length, expected);
            }
            if Column::Sequence.of(cell) < 0 {
                return fail(Column::Sequence, "a dataset index of at least 0".into());
            }
            if offset < 0 {
                return fail(Column::Offset, "at least 0".into());
            }
            if carry && offset > 0 && start > 0 {
                let expected = "0 where the piece does not open its block (with state carried \
                                across batches, a piece continues its sequence only at the start \
                                of a row)";
                return fail(Column::Offset, expected.into());
            }
            // Checked: offset + length may exceed i64 (and positions would wrap).
            match offset.checked_add(length) {
                Some(end) if Column::SequenceLength.of(cell) >= end => {}
                Some(end) => {
                    return fail(
                        Column::SequenceLength,
                        format!("at least offset + length = {end}"),
                    )
                }
                None => {
                    let expected = format!("at most {} (2^63 - 1 - length)", i64::MAX - length);
                    return fail(Column::Offset, expected);
                }
            }
            previous_block = block;
            previous_end = start + length;
        }
        Ok(BlockTable {
            cells,
            blocks: blocks as usize,
            t_max: t_max as usize,
            carry,
            positions: Positions::Sequence,
        })
    }

    /// The table, writing `position_ids` as `positions` says.
    pub fn with_positions(self, positions: Positions) -> Self {
        BlockTable { positions, ..self }
    }

    /// The table's rows, in order.
    pub fn rows(&self) -> impl ExactSizeIterator<Item = &'a TableRow> + 'a {
        rows_of(self.cells)
    }

    pub fn blocks(&self) -> usize {
        self.blocks
    }

    pub fn t_max(&self) -> usize {
        self.t_max
    }
}

/// The checks on a batch's shape that need no table.
pub fn check_batch_shape(blocks: i64, t_max: i64) -> Result<()> {
    if blocks < 1 {
        return Err(Error::invalid("blocks", blocks, "at least 1 block"));
    }
    if t_max < 1 {
        return Err(Error::invalid("t_max", t_max, "at least 1 step per block"));
    }
    if t_max > MAX_BATCH_STEPS / blocks {
        return Err(Error::invalid(
            "blocks * t_max",
            format!("{blocks} * {t_max}"),
            format!(
                "at most {MAX_BATCH_STEPS} steps per batch (cu_seqlens and segment ids are int32)"
            ),
        ));
    }
    Ok(())
}

fn check_whole_rows(cells: &[i64]) -> Result<()> {
    if cells.len() % Column::COUNT != 0 {
        return Err(Error::invalid(
            "table",
            format!("{} cells", cells.len()),
            format!("rows of {} cells", Column::COUNT),
        ));
    }
    Ok(())
}

/// The whole rows of row-major `cells`.
fn rows_of(cells: &[i64]) -> impl ExactSizeIterator<Item = &TableRow> + '_ {
    // Exact chunks of the row size: every one converts.
    cells
        .chunks_exact(Column::COUNT)
        .map(|row| <&TableRow>::try_from(row).unwrap_or(&[0; Column::COUNT]))
}

mod attention;
mod batch;
mod buffers;
mod fields;
mod steps;

pub use attention::{padded_segments_bound, KvBlocksMut, Positions};
pub use buffers::{FieldBuffer, FieldDtype};
pub use fields::{same_names, BatchField, BatchTablesMut, DimRule, FieldShape, BATCH_FIELD_NAMES};
pub use steps::{write_cu_seqlens, StepTables};

#[cfg(test)]
mod state_tests;
#[cfg(test)]
mod tests;
