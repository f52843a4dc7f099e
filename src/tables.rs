//! Per-step tables derived from block tables: the forms recurrent models (reset mask),
//! flash-attention's varlen kernels (`cu_seqlens`) and Mamba-style kernels (`seq_idx`, here the
//! segment index) consume. Each table is `[blocks, t_max]`, row-major, one row per block.

use crate::plan::{Batch, Block};

impl Block<'_> {
    /// `true` at the first step of every piece: a recurrent model resets its state there. State
    /// never carries across blocks, so a piece that continues a split sequence resets too (its
    /// `continues` flag and positions say it is not the sequence's start).
    pub fn write_reset_mask(&self, row: &mut [bool]) {
        row.fill(false);
        for piece in self.pieces() {
            row[piece.block_offset as usize] = true;
        }
    }

    /// `true` on real steps, `false` on padding.
    pub fn write_valid_mask(&self, row: &mut [bool]) {
        let used = self.used() as usize;
        row[..used].fill(true);
        row[used..].fill(false);
    }

    /// Index of the piece inside its block at every step (0, 1, ...), -1 on padding.
    pub fn write_segment_ids(&self, row: &mut [i32]) {
        row.fill(-1);
        for (segment, piece) in (0..).zip(self.pieces()) {
            row[piece_steps(piece)].fill(segment);
        }
    }

    /// Step index inside the sequence at every step (a split sequence's later pieces go on
    /// counting), 0 on padding.
    pub fn write_position_ids(&self, row: &mut [i64]) {
        row.fill(0);
        for piece in self.pieces() {
            for (slot, position) in row[piece_steps(piece)].iter_mut().zip(piece.offset..) {
                *slot = i64::from(position);
            }
        }
    }
}

fn piece_steps(piece: crate::Piece) -> std::ops::Range<usize> {
    let start = piece.block_offset as usize;
    start..start + piece.length as usize
}

/// All per-step tables of one batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepTables {
    pub blocks: usize,
    pub t_max: usize,
    pub reset: Vec<bool>,
    pub valid: Vec<bool>,
    pub segment_ids: Vec<i32>,
    pub position_ids: Vec<i64>,
    /// Prefix sums of piece lengths over the batch's valid steps, in block then piece order,
    /// starting at 0: the `cu_seqlens` of flash-attention's varlen kernels for the batch with
    /// padding removed (`x.flatten(0, 1)[valid.flatten()]`). One entry more than pieces.
    pub cu_seqlens: Vec<i32>,
    /// Dataset index of every piece, in the same order.
    pub indices: Vec<i64>,
}

/// Columns of a block table row, in order: the piece's block in the batch, its first step in
/// the block, its steps, its sequence, its first step in the sequence, and the sequence's length.
/// The C++ and Python APIs hand batches out as int64 tensors `[pieces, 6]` of these rows.
pub const TABLE_COLUMNS: [&str; 6] = [
    "block",
    "block_offset",
    "length",
    "sequence",
    "offset",
    "sequence_length",
];

impl Batch<'_> {
    /// The batch's block table: one row per piece, in block then piece order (see
    /// [`TABLE_COLUMNS`]).
    pub fn table(&self) -> Vec<[i64; 6]> {
        let lengths = self.lengths();
        let mut rows = Vec::new();
        for (block, pieces) in (0..).zip(self.blocks()) {
            rows.extend(pieces.pieces().map(|piece| {
                [
                    block,
                    i64::from(piece.block_offset),
                    i64::from(piece.length),
                    i64::from(piece.index),
                    i64::from(piece.offset),
                    i64::from(lengths[piece.index as usize]),
                ]
            }));
        }
        rows
    }

    pub fn tables(&self) -> StepTables {
        let t_max = self.t_max() as usize;
        let blocks = self.blocks().len();
        let mut tables = StepTables {
            blocks,
            t_max,
            reset: vec![false; blocks * t_max],
            valid: vec![false; blocks * t_max],
            segment_ids: vec![0; blocks * t_max],
            position_ids: vec![0; blocks * t_max],
            cu_seqlens: vec![0],
            indices: Vec::new(),
        };
        let mut valid_steps = 0i32;
        for (row, block) in self.blocks().enumerate() {
            let steps = row * t_max..(row + 1) * t_max;
            block.write_reset_mask(&mut tables.reset[steps.clone()]);
            block.write_valid_mask(&mut tables.valid[steps.clone()]);
            block.write_segment_ids(&mut tables.segment_ids[steps.clone()]);
            block.write_position_ids(&mut tables.position_ids[steps]);
            for piece in block.pieces() {
                // Fits: Options::validate bounds blocks_per_batch * t_max by i32::MAX.
                valid_steps += piece.length as i32;
                tables.cu_seqlens.push(valid_steps);
                tables.indices.push(i64::from(piece.index));
            }
        }
        tables
    }
}
