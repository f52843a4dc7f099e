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
        })
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

    /// `true` at the first step of every piece: a recurrent model resets its state there.
    /// Without carried state, state never crosses a block, so a piece that continues a split
    /// sequence resets too (its positions say it is not the sequence's start). With it, a piece
    /// that continues its sequence goes on from the state its row carried: only the starts of
    /// sequences reset.
    pub fn write_reset_mask(&self, out: &mut [bool]) -> Result<()> {
        let out = self.step_table("reset", out)?;
        out.fill(false);
        for row in self.rows() {
            if !(self.carry && Column::Offset.of(row) > 0) {
                out[self.first_step(row)] = true;
            }
        }
        Ok(())
    }

    /// `true` at the last step of every sequence (where a piece reaches its sequence's end), so
    /// a loss on a sequence's final state needs no arithmetic on the table.
    pub fn write_end_mask(&self, out: &mut [bool]) -> Result<()> {
        let out = self.step_table("ends", out)?;
        out.fill(false);
        for row in self.rows() {
            // Checked in new(): offset + length fits i64 and is at most the sequence's length.
            if Column::Offset.of(row) + Column::Length.of(row) == Column::SequenceLength.of(row) {
                out[self.steps(row).end - 1] = true;
            }
        }
        Ok(())
    }

    /// `[blocks]`: `true` where the block's first step continues the state its row had at the
    /// end of the previous batch (a model keeps that state; it zeroes the others'). Only a table
    /// with carried state has any.
    pub fn write_carry_mask(&self, out: &mut [bool]) -> Result<()> {
        if out.len() != self.blocks {
            let expected = format!("{} values, one per block", self.blocks);
            return Err(Error::invalid(
                "carry",
                format!("{} values", out.len()),
                expected,
            ));
        }
        out.fill(false);
        for row in self.rows() {
            if self.carry && Column::Offset.of(row) > 0 {
                // with_carry() checked that such a piece opens its block.
                out[Column::Block.of(row) as usize] = true;
            }
        }
        Ok(())
    }

    /// `true` on real steps, `false` on padding.
    pub fn write_valid_mask(&self, out: &mut [bool]) -> Result<()> {
        let out = self.step_table("valid", out)?;
        out.fill(false);
        for row in self.rows() {
            out[self.steps(row)].fill(true);
        }
        Ok(())
    }

    /// Index of the piece inside its block at every step (0, 1, ...), -1 on padding.
    pub fn write_segment_ids(&self, out: &mut [i32]) -> Result<()> {
        let out = self.step_table("segment_ids", out)?;
        out.fill(-1);
        let (mut block, mut segment) = (-1, 0);
        for row in self.rows() {
            segment = if Column::Block.of(row) == block {
                segment + 1
            } else {
                0
            };
            block = Column::Block.of(row);
            out[self.steps(row)].fill(segment);
        }
        Ok(())
    }

    /// Step index inside the sequence at every step (a split sequence's later pieces go on
    /// counting), 0 on padding.
    pub fn write_position_ids(&self, out: &mut [i64]) -> Result<()> {
        let out = self.step_table("position_ids", out)?;
        out.fill(0);
        for row in self.rows() {
            // Checked in new(): offset + length fits i64.
            for (slot, position) in out[self.steps(row)]
                .iter_mut()
                .zip(Column::Offset.of(row)..)
            {
                *slot = position;
            }
        }
        Ok(())
    }

    /// Every per-step table of this batch, and its `cu_seqlens` and indices.
    pub fn step_tables(&self) -> StepTables {
        let steps = self.blocks * self.t_max;
        let mut tables = StepTables {
            blocks: self.blocks,
            t_max: self.t_max,
            reset: vec![false; steps],
            valid: vec![false; steps],
            ends: vec![false; steps],
            carry: vec![false; self.blocks],
            segment_ids: vec![0; steps],
            position_ids: vec![0; steps],
            cu_seqlens: vec![0; self.rows().len() + 1],
            indices: self.rows().map(|row| Column::Sequence.of(row)).collect(),
        };
        // Buffers of the right size for a checked table: none of these can fail.
        let written = self
            .write_reset_mask(&mut tables.reset)
            .and_then(|()| self.write_valid_mask(&mut tables.valid))
            .and_then(|()| self.write_end_mask(&mut tables.ends))
            .and_then(|()| self.write_carry_mask(&mut tables.carry))
            .and_then(|()| self.write_segment_ids(&mut tables.segment_ids))
            .and_then(|()| self.write_position_ids(&mut tables.position_ids))
            .and_then(|()| write_cu_seqlens_of(self.cells, &mut tables.cu_seqlens));
        debug_assert!(written.is_ok(), "{written:?}");
        tables
    }

    /// `out`, checked to hold one value per step of the batch.
    fn step_table<'o, T>(&self, name: &str, out: &'o mut [T]) -> Result<&'o mut [T]> {
        let steps = self.blocks * self.t_max;
        if out.len() != steps {
            let expected = format!(
                "{steps} values, blocks * t_max = {} * {}",
                self.blocks, self.t_max
            );
            return Err(Error::invalid(
                name,
                format!("{} values", out.len()),
                expected,
            ));
        }
        Ok(out)
    }

    fn first_step(&self, row: &TableRow) -> usize {
        Column::Block.of(row) as usize * self.t_max + Column::BlockOffset.of(row) as usize
    }

    fn steps(&self, row: &TableRow) -> std::ops::Range<usize> {
        let first = self.first_step(row);
        first..first + Column::Length.of(row) as usize
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

/// Prefix sums of the pieces' lengths from 0, `rows + 1` values: flash-attention's varlen
/// offsets over the batch's valid steps (`x.flatten(0, 1)[valid.flatten()]`). Needs no batch
/// shape, so it checks only the lengths.
pub fn write_cu_seqlens(cells: &[i64], out: &mut [i32]) -> Result<()> {
    check_whole_rows(cells)?;
    write_cu_seqlens_of(cells, out)
}

fn write_cu_seqlens_of(cells: &[i64], out: &mut [i32]) -> Result<()> {
    let rows = rows_of(cells);
    if out.len() != rows.len() + 1 {
        let expected = format!("{} values, one more than the table's rows", rows.len() + 1);
        return Err(Error::invalid(
            "cu_seqlens",
            format!("{} values", out.len()),
            expected,
        ));
    }
    let mut total = 0i64;
    out[0] = 0;
    for (row, cell) in rows.enumerate() {
        let length = Column::Length.of(cell);
        if length < 1 {
            return Err(Error::invalid(
                format!("table[{row}, length]"),
                length,
                "at least 1",
            ));
        }
        total = total.saturating_add(length);
        if total > MAX_BATCH_STEPS {
            return Err(Error::invalid(
                "table[:, length]",
                format!("lengths that add up to more than {MAX_BATCH_STEPS} steps by row {row}"),
                format!("at most {MAX_BATCH_STEPS} steps (cu_seqlens are int32)"),
            ));
        }
        out[row + 1] = total as i32;
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

/// All per-step tables of one batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepTables {
    pub blocks: usize,
    pub t_max: usize,
    pub reset: Vec<bool>,
    pub valid: Vec<bool>,
    /// `true` at the last step of every sequence.
    pub ends: Vec<bool>,
    /// `[blocks]`: the block's row carries its state over from the previous batch.
    pub carry: Vec<bool>,
    pub segment_ids: Vec<i32>,
    pub position_ids: Vec<i64>,
    /// Prefix sums of piece lengths over the batch's valid steps, in block then piece order,
    /// starting at 0 (see [`write_cu_seqlens`]). One entry more than pieces.
    pub cu_seqlens: Vec<i32>,
    /// Dataset index of every piece, in the same order.
    pub indices: Vec<i64>,
}

mod batch;

#[cfg(test)]
mod tests;
