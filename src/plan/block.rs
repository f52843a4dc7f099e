//! Reading a plan: its blocks as [`Piece`]s (a rank's batches of them are `shard.rs`'s).
//!
//! A plan stores each piece as just its sequence (4 bytes); a [`Block`] is a view of a span of
//! those, and expands them into full [`Piece`]s (offsets, lengths, block offsets) only as they
//! are read. That keeps plans of millions of sequences small, and every rank only expands the
//! blocks of its own shard.

use super::layout::SplitPiece;
use super::EpochPlan;
use serde::Serialize;

/// A run of consecutive steps of one sequence, placed in a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Piece {
    /// The sequence's index in the lengths the plan was made from.
    pub index: u32,
    /// Where the piece starts inside its sequence.
    pub offset: u32,
    /// Steps in the piece.
    pub length: u32,
    /// Where the piece starts inside its block.
    pub block_offset: u32,
    /// The piece carries on from the previous piece of the same sequence (its `offset` is not 0).
    pub continues: bool,
}

impl EpochPlan {
    /// The `position`-th block in epoch order, or an error naming a position from
    /// `num_blocks()` on.
    pub fn block(&self, position: usize) -> crate::Result<Block<'_>> {
        if position >= self.spans.len() {
            return Err(crate::Error::invalid(
                "position",
                position,
                format!("a block of the plan's {}, from 0", self.spans.len()),
            ));
        }
        Ok(self.block_at(position))
    }

    /// The `position`-th block, for positions known to be below `num_blocks()`.
    pub(crate) fn block_at(&self, position: usize) -> Block<'_> {
        let span = self.spans[position];
        let range = span.start as usize..span.end as usize;
        // This block's split pieces, if any, start at the first entry at or after it.
        let first = self
            .split_pieces
            .partition_point(|split| split.position < span.start);
        Block {
            first_piece: span.start,
            sequences: &self.piece_sequences[range],
            split_pieces: &self.split_pieces[first..],
            lengths: &self.lengths,
            t_max: self.options.t_max,
        }
    }

    /// All blocks in epoch order.
    pub fn blocks(&self) -> impl ExactSizeIterator<Item = Block<'_>> + '_ {
        (0..self.spans.len()).map(|position| self.block_at(position))
    }
}

/// One block: its pieces in order; the rest of its `t_max` steps are padding.
#[derive(Debug, Clone, Copy)]
pub struct Block<'a> {
    first_piece: u32,
    sequences: &'a [u32],
    split_pieces: &'a [SplitPiece],
    /// Every sequence's length.
    lengths: &'a [u32],
    t_max: u32,
}

impl<'a> Block<'a> {
    /// Number of pieces.
    pub fn len(&self) -> usize {
        self.sequences.len()
    }

    /// A block with no piece: all padding (only when a plan has more blocks than pieces).
    pub fn is_empty(&self) -> bool {
        self.sequences.is_empty()
    }

    pub fn t_max(&self) -> u32 {
        self.t_max
    }

    /// The block table: every piece with its sequence, offsets and length.
    pub fn pieces(&self) -> impl Iterator<Item = Piece> + 'a {
        let mut split_pieces = self.split_pieces.iter().peekable();
        let lengths = self.lengths;
        let mut block_offset = 0;
        (self.first_piece..)
            .zip(self.sequences)
            .map(move |(position, &index)| {
                let (offset, length) = match split_pieces.next_if(|s| s.position == position) {
                    Some(split) => (split.offset, split.length),
                    None => (0, lengths[index as usize]),
                };
                let piece = Piece {
                    index,
                    offset,
                    length,
                    block_offset,
                    continues: offset > 0,
                };
                block_offset += length;
                piece
            })
    }

    /// Real (non-padding) steps.
    pub fn used(&self) -> u32 {
        self.pieces().map(|piece| piece.length).sum()
    }

    pub fn padding(&self) -> u32 {
        self.t_max - self.used()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{Options, Oversize};
    use crate::plan::identities::packed_part;
    use crate::plan::Planner;

    fn piece(index: u32, offset: u32, length: u32, block_offset: u32) -> Piece {
        Piece {
            index,
            offset,
            length,
            block_offset,
            continues: offset > 0,
        }
    }

    #[test]
    fn pieces_take_split_entries_at_their_positions_and_whole_lengths_elsewhere() {
        let lengths = [25, 2, 3, 40];
        // Sequence 0's tail (20..25) is the block's second piece, at plan position 6; the entry
        // at position 9 belongs to a later block and must not be taken.
        let split_pieces = [
            SplitPiece {
                position: 6,
                offset: 20,
                length: 5,
            },
            SplitPiece {
                position: 9,
                offset: 0,
                length: 10,
            },
        ];
        let block = Block {
            first_piece: 5,
            sequences: &[1, 0, 2],
            split_pieces: &split_pieces,
            lengths: &lengths,
            t_max: 12,
        };
        let pieces: Vec<Piece> = block.pieces().collect();
        assert_eq!(
            pieces,
            [piece(1, 0, 2, 0), piece(0, 20, 5, 2), piece(2, 0, 3, 7)]
        );
        assert!(!pieces[0].continues && pieces[1].continues);
        assert_eq!((block.len(), block.used(), block.padding()), (3, 10, 2));
        assert!(!block.is_empty());
    }

    #[test]
    fn an_empty_block_is_all_padding() {
        let block = Block {
            first_piece: 0,
            sequences: &[],
            split_pieces: &[],
            lengths: &[4],
            t_max: 8,
        };
        assert!(block.is_empty());
        assert_eq!(block.pieces().count(), 0);
        assert_eq!((block.used(), block.padding(), block.t_max()), (0, 8, 8));
    }

    #[test]
    fn blocks_of_a_split_plan_hold_whole_chunks_or_packed_parts() {
        let mut options = Options::new(10);
        options.oversize = Oversize::Split;
        let lengths = vec![25, 3, 30, 7, 12, 20];
        let plan = Planner::new(lengths.clone(), options)
            .unwrap()
            .plan(3)
            .unwrap();
        assert_eq!(plan.blocks().len(), plan.num_blocks());
        for block in plan.blocks() {
            let mut next_offset = 0;
            for piece in block.pieces() {
                assert_eq!(piece.block_offset, next_offset);
                next_offset += piece.length;
                let length = lengths[piece.index as usize];
                if piece.length == 10 && length > 10 {
                    // A full chunk has a block of its own.
                    assert_eq!(block.len(), 1);
                    assert_eq!(piece.offset % 10, 0);
                } else {
                    // A whole sequence or the tail of a split one.
                    assert_eq!(piece.offset + piece.length, length);
                    assert_eq!(piece.length, packed_part(length, 10));
                }
            }
            assert_eq!(block.used(), next_offset);
        }
    }
}
