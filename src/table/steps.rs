//! The per-step tables a checked [`BlockTable`] writes, each into a caller's buffer (the
//! operators hand their tensors' memory in through the bridge), and all of them at once as
//! [`StepTables`] for the core's own batches.

use super::{
    check_whole_rows, rows_of, BatchField, BatchTablesMut, BlockTable, Column, Positions, TableRow,
    MAX_BATCH_STEPS,
};
use crate::error::{Error, Result};

impl BlockTable<'_> {
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

    /// Every table of the batch written from its block table ([`BatchField::FROM_TABLE`]), each
    /// into a caller's buffer, from this one check of the table and one pass over its rows: what
    /// a loader calls per batch (the `batch_tables` operator), instead of a check and a pass per
    /// table. Row `j` is lane `first_lane + j`.
    ///
    /// `state_in` and `state_out` say the carried state per piece, for kernels that run over
    /// `cu_seqlens` with one initial state per piece and return one final state per piece: a
    /// piece that continues its sequence (carried state only) takes its row's lane state, and a
    /// row's last piece, when it is cut at the row's end before its sequence's, gives the lane
    /// its state for the next batch (where that sequence goes on in the same row). Every other
    /// piece starts from zeros, and every other row's lane state is never read again (its next
    /// piece starts a sequence), so it is left as it is.
    pub fn write_batch(&self, first_lane: i64, out: BatchTablesMut<'_>) -> Result<()> {
        let steps = self.blocks * self.t_max;
        let pieces = self.rows().len();
        let sizes = [
            (BatchField::Reset, out.reset.len()),
            (BatchField::Valid, out.valid.len()),
            (BatchField::Ends, out.ends.len()),
            (BatchField::Carry, out.carry.len()),
            (BatchField::Lanes, out.lanes.len()),
            (BatchField::SegmentIds, out.segment_ids.len()),
            (BatchField::PositionIds, out.position_ids.len()),
            (BatchField::CuSeqlens, out.cu_seqlens.len()),
            (BatchField::Indices, out.indices.len()),
            (BatchField::StateIn, out.state_in.len()),
            (BatchField::StateOut, out.state_out.len()),
            (BatchField::DocumentIds, out.document_ids.len()),
            (BatchField::CuSeqlensPadded, out.cu_seqlens_padded.len()),
        ];
        for (field, len) in sizes {
            let expected: usize = field
                .shape()
                .dims(self.blocks, self.t_max, pieces)
                .iter()
                .product();
            if len != expected {
                let rule = field.shape().rule();
                let expected = format!("{expected} values, {rule} of a batch of {} blocks of {} steps and {pieces} pieces", self.blocks, self.t_max);
                return Err(Error::invalid(
                    field.name(),
                    format!("{len} values"),
                    expected,
                ));
            }
        }
        let last_lane = i64::try_from(self.blocks - 1)
            .ok()
            .and_then(|rows| first_lane.checked_add(rows));
        if first_lane < 0 || last_lane.is_none() {
            let expected = format!(
                "from 0 to {} (the lane of the batch's first row)",
                i64::MAX - (self.blocks as i64 - 1)
            );
            return Err(Error::invalid("first_lane", first_lane, expected));
        }
        debug_assert_eq!(out.valid.len(), steps);
        out.reset.fill(false);
        out.valid.fill(false);
        out.ends.fill(false);
        out.carry.fill(false);
        out.segment_ids.fill(-1);
        out.position_ids.fill(0);
        out.state_out.fill(-1);
        for (lane, row) in out.lanes.iter_mut().zip(first_lane..) {
            *lane = row;
        }
        out.cu_seqlens[0] = 0;
        let (mut block, mut segment, mut total) = (-1i64, 0i32, 0i32);
        for (index, row) in self.rows().enumerate() {
            let piece = self.steps(row);
            let offset = Column::Offset.of(row);
            let continues = self.carry && offset > 0;
            out.reset[piece.start] = !continues;
            if continues {
                // with_carry() checked that such a piece opens its block.
                out.carry[Column::Block.of(row) as usize] = true;
            }
            out.valid[piece.clone()].fill(true);
            // Checked in new(): offset + length fits i64 and is at most the sequence's length.
            let ends_sequence = offset + Column::Length.of(row) == Column::SequenceLength.of(row);
            out.ends[piece.end - 1] = ends_sequence;
            segment = if Column::Block.of(row) == block {
                segment + 1
            } else {
                0
            };
            block = Column::Block.of(row);
            out.segment_ids[piece.clone()].fill(segment);
            let first_position = match self.positions {
                Positions::Sequence => offset,
                Positions::Piece => 0,
            };
            for (slot, position) in out.position_ids[piece.clone()]
                .iter_mut()
                .zip(first_position..)
            {
                *slot = position;
            }
            // Pieces do not overlap, so the total is at most blocks * t_max, which
            // check_batch_shape() bounded by i32::MAX.
            total += piece.len() as i32;
            out.cu_seqlens[index + 1] = total;
            out.indices[index] = Column::Sequence.of(row);
            out.state_in[index] = if continues { block } else { -1 };
            if self.carry && piece.end % self.t_max == 0 && !ends_sequence {
                // Cut at its row's end: the next batch's same row goes on with its sequence.
                // The row's last piece, so the index fits (pieces are at most blocks * t_max).
                out.state_out[block as usize] = index as i64;
            }
        }
        self.write_documents(out.document_ids, out.cu_seqlens_padded);
        Ok(())
    }

    /// Every table of this batch, in vectors of its own; its rows are lanes `first_lane`, ...
    pub fn step_tables(&self, first_lane: u32) -> StepTables {
        let steps = self.blocks * self.t_max;
        let pieces = self.rows().len();
        let mut tables = StepTables {
            blocks: self.blocks,
            t_max: self.t_max,
            reset: vec![false; steps],
            valid: vec![false; steps],
            ends: vec![false; steps],
            carry: vec![false; self.blocks],
            lanes: vec![0; self.blocks],
            segment_ids: vec![0; steps],
            position_ids: vec![0; steps],
            cu_seqlens: vec![0; pieces + 1],
            indices: vec![0; pieces],
            state_in: vec![0; pieces],
            state_out: vec![0; self.blocks],
            document_ids: vec![0; steps],
            cu_seqlens_padded: vec![0; super::padded_segments_bound(self.blocks, pieces)],
            max_seqlen: self.max_seqlen(),
        };
        // Buffers of the right size and a lane that fits: this cannot fail.
        let written = self.write_batch(i64::from(first_lane), tables.as_mut());
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

/// All the tables of one batch written from its block table ([`BatchField::FROM_TABLE`]).
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
    /// `[blocks]`: the lane of every row.
    pub lanes: Vec<i64>,
    pub segment_ids: Vec<i32>,
    pub position_ids: Vec<i64>,
    /// Prefix sums of piece lengths over the batch's valid steps, in block then piece order,
    /// starting at 0 (see [`write_cu_seqlens`]). One entry more than pieces.
    pub cu_seqlens: Vec<i32>,
    /// Dataset index of every piece, in the same order.
    pub indices: Vec<i64>,
    /// `[pieces]`: the row whose lane's saved state seeds every piece (in `cu_seqlens` order),
    /// -1 where it starts from zeros. Only a table with carried state has any at least 0.
    pub state_in: Vec<i64>,
    /// `[blocks]`: the piece (an index into `state_in`'s order) whose final state the row's lane
    /// keeps for the next batch, -1 where nothing reads the lane's state again.
    pub state_out: Vec<i64>,
    /// The step's document (piece or padding run), numbered in flattened order.
    pub document_ids: Vec<i32>,
    /// The documents' offsets over the flattened layout, then `blocks * t_max` repeated.
    pub cu_seqlens_padded: Vec<i32>,
    /// The longest piece's steps (a host integer, not written by `write_batch`).
    pub max_seqlen: i64,
}

impl StepTables {
    pub(super) fn as_mut(&mut self) -> BatchTablesMut<'_> {
        BatchTablesMut {
            reset: &mut self.reset,
            valid: &mut self.valid,
            ends: &mut self.ends,
            carry: &mut self.carry,
            lanes: &mut self.lanes,
            segment_ids: &mut self.segment_ids,
            position_ids: &mut self.position_ids,
            cu_seqlens: &mut self.cu_seqlens,
            indices: &mut self.indices,
            state_in: &mut self.state_in,
            state_out: &mut self.state_out,
            document_ids: &mut self.document_ids,
            cu_seqlens_padded: &mut self.cu_seqlens_padded,
        }
    }
}
