//! A planned batch's block table, and its per-step tables written from it by [`BlockTable`]:
//! the core's own batches go through the same implementation as tables that arrive from outside.

use super::{BlockTable, Column, Positions, StepTables, TableRow};
use crate::plan::Batch;

impl Batch<'_> {
    /// The batch's block table: one row per piece, in block then piece order (see [`Column`]).
    pub fn table(&self) -> Vec<TableRow> {
        let lengths = self.lengths();
        let mut rows = Vec::new();
        for (block, pieces) in (0..).zip(self.blocks()) {
            rows.extend(pieces.pieces().map(|piece| {
                let mut row = [0; Column::COUNT];
                row[Column::Block as usize] = block;
                row[Column::BlockOffset as usize] = i64::from(piece.block_offset);
                row[Column::Length as usize] = i64::from(piece.length);
                row[Column::Sequence as usize] = i64::from(piece.index);
                row[Column::Offset as usize] = i64::from(piece.offset);
                row[Column::SequenceLength as usize] = i64::from(lengths[piece.index as usize]);
                row
            }));
        }
        rows
    }

    /// The batch's tables, written from its block table by [`BlockTable::write_batch`].
    pub fn tables(&self) -> StepTables {
        self.tables_with(Positions::Sequence)
    }

    /// [`Batch::tables`], with `position_ids` as `positions` says.
    pub fn tables_with(&self, positions: Positions) -> StepTables {
        let cells = self.table().concat();
        let blocks = self.blocks().len();
        BlockTable {
            cells: &cells,
            blocks,
            t_max: self.t_max() as usize,
            carry: self.carries_state(),
            positions,
        }
        .step_tables(self.lanes().next().unwrap_or(0))
    }
}
