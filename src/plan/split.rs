//! Split mode: sequences longer than `t_max` are cut into full `t_max` chunks, a block each, and
//! a shorter tail that is packed like any sequence.
//!
//! Most pieces are whole sequences and a plan stores only their sequence; the few pieces of split
//! sequences are the exception, so they are listed apart, by their position among the plan's
//! pieces, as [`SplitPiece`]s that a block looks up when it is read.

use super::layout::{Span, SplitPiece};
use super::{EpochPlan, Planner};
use crate::alloc::{try_reserve, try_vec, try_with_capacity};
use crate::error::Result;

impl Planner {
    /// Split mode: records where each oversized sequence's packed tail starts and how long it
    /// is, and adds its full chunks, a block each (`plan.spans` has room for them).
    pub(super) fn add_split_pieces(&self, plan: &mut EpochPlan) -> Result<()> {
        if self.oversized.is_empty() {
            return Ok(());
        }
        let t_max = self.options.t_max;
        // A bitset, not a look-up of every piece's length: that read would miss the cache for
        // every piece of a large dataset.
        let words = self.lengths.len().div_ceil(64);
        let mut is_oversized = try_vec("the sequences to split, as bits", words, 0u64)?;
        for &index in &self.oversized {
            is_oversized[index as usize / 64] |= 1 << (index % 64);
        }
        let split_pieces = usize::try_from(self.split_pieces).unwrap_or(usize::MAX);
        let mut split = try_with_capacity("the pieces of split sequences", split_pieces)?;
        let full_chunks = usize::try_from(self.full_chunks).unwrap_or(usize::MAX);
        let piece_sequences = plan.piece_sequences.vec("the plan's pieces")?;
        let spans = plan.spans.vec("the plan's blocks")?;
        try_reserve(piece_sequences, "the plan's pieces", full_chunks)?;
        for (position, &index) in (0u32..).zip(piece_sequences.iter()) {
            if is_oversized[index as usize / 64] >> (index % 64) & 1 == 1 {
                let length = self.lengths[index as usize];
                split.push(SplitPiece {
                    position,
                    offset: length - length % t_max,
                    length: length % t_max,
                });
            }
        }
        for &index in &self.oversized {
            for chunk in 0..self.lengths[index as usize] / t_max {
                let position = piece_sequences.len() as u32;
                piece_sequences.push(index);
                split.push(SplitPiece {
                    position,
                    offset: chunk * t_max,
                    length: t_max,
                });
                spans.push(Span {
                    start: position,
                    end: position + 1,
                });
            }
        }
        plan.split_pieces = split.into();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{Options, Oversize};
    use crate::plan::resume::Origin;
    use crate::stats::PlanStats;

    fn split_planner(lengths: Vec<u32>, t_max: u32) -> Planner {
        let mut options = Options::new(t_max);
        options.oversize = Oversize::Split;
        Planner::new(lengths, options).unwrap()
    }

    /// A plan as `Planner::plan` has it just before the split pieces are added: the packed
    /// parts in `piece_sequences`, one block for all of them.
    fn packed_only(planner: &Planner, piece_sequences: Vec<u32>) -> EpochPlan {
        let end = piece_sequences.len() as u32;
        EpochPlan {
            epoch: 0,
            options: planner.options.clone(),
            lengths: planner.lengths.clone(),
            piece_sequences: piece_sequences.into(),
            split_pieces: Vec::new().into(),
            spans: vec![Span { start: 0, end }].into(),
            stats: PlanStats::default(),
            measured: std::sync::OnceLock::new(),
            origin: Origin::own(planner.options.world_size),
        }
    }

    fn split(position: u32, offset: u32, length: u32) -> SplitPiece {
        SplitPiece {
            position,
            offset,
            length,
        }
    }

    #[test]
    fn tails_are_found_in_place_and_full_chunks_appended_a_block_each() {
        // Oversized: 0 (2 chunks and a tail of 5), 2 (3 chunks, no tail), 3 (2 chunks).
        let planner = split_planner(vec![25, 3, 30, 20], 10);
        let mut plan = packed_only(&planner, vec![1, 0]);
        planner.add_split_pieces(&mut plan).unwrap();
        assert_eq!(plan.piece_sequences, [1, 0, 0, 0, 2, 2, 2, 3, 3]);
        assert_eq!(
            plan.split_pieces,
            [
                split(1, 20, 5),
                split(2, 0, 10),
                split(3, 10, 10),
                split(4, 0, 10),
                split(5, 10, 10),
                split(6, 20, 10),
                split(7, 0, 10),
                split(8, 10, 10),
            ]
        );
        let chunk_spans: Vec<(u32, u32)> =
            plan.spans[1..].iter().map(|s| (s.start, s.end)).collect();
        assert_eq!(chunk_spans, (2..9).map(|p| (p, p + 1)).collect::<Vec<_>>());
    }

    #[test]
    fn nothing_is_added_without_oversized_sequences() {
        let planner = split_planner(vec![4, 10, 6], 10);
        let mut plan = packed_only(&planner, vec![2, 0, 1]);
        planner.add_split_pieces(&mut plan).unwrap();
        assert_eq!(plan.piece_sequences, [2, 0, 1]);
        assert!(plan.split_pieces.is_empty());
        assert_eq!(plan.spans.len(), 1);
    }

    #[test]
    fn split_pieces_cover_each_oversized_sequence_exactly_once() {
        // Indices past 64 exercise the bitset's later words.
        let mut lengths: Vec<u32> = (0..150).map(|i| 1 + i % 9).collect();
        for (index, length) in [(3, 25), (64, 30), (70, 11), (149, 47), (100, 9)] {
            lengths[index] = length;
        }
        let planner = split_planner(lengths.clone(), 9);
        for epoch in 0..3 {
            let plan = planner.plan(epoch).unwrap();
            let mut covered: Vec<Vec<(u32, u32)>> = vec![Vec::new(); lengths.len()];
            for block in plan.blocks() {
                for piece in block.pieces() {
                    covered[piece.index as usize].push((piece.offset, piece.length));
                }
            }
            for (index, mut pieces) in covered.into_iter().enumerate() {
                pieces.sort_unstable();
                let mut next = 0;
                for (offset, length) in pieces {
                    assert_eq!(offset, next, "sequence {index} in epoch {epoch}");
                    assert!(length > 0 && length <= 9);
                    next += length;
                }
                assert_eq!(next, lengths[index], "sequence {index} in epoch {epoch}");
            }
        }
    }
}
