//! A packing kept between epochs, as runs of equal consecutive blocks.
//!
//! A `best_fit` packing depends on the lengths and options, not on the epoch, so a planner makes
//! it once. Kept whole it would cost 4 bytes a piece and a block; but the fill closes block
//! after equal block (Graphcore's Wikipedia histogram: 8.1M blocks in 667 runs of 3,032 lengths
//! in all; its SQuAD histogram, 40,601 blocks in 550), so each run's block is kept once with its
//! count, and the packing is laid out again from them at about the speed of a copy.

use super::Packing;
use crate::alloc::{try_push, try_with_capacity_huge};
use crate::error::Result;

/// Runs holding more lengths than this (and as many runs) are not kept: a packing of so many
/// distinct blocks is made again each epoch rather than held.
const MAX_KEPT: usize = 1 << 20;
/// Nor runs taking more than a byte for this many of the packing's pieces: a planner holds
/// little of its own (a node's ranks sharing one plan file each hold under a byte a sequence,
/// `plan/shared`), and a packing that repeats so little is quick to make again.
const PIECES_PER_KEPT_BYTE: usize = 4;

const KEPT: &str = "the kept packing's blocks";

#[derive(Debug, Clone, Default)]
pub(crate) struct BlockRuns {
    /// Each run's block once, end to end.
    lengths: Vec<u32>,
    /// Per run: where its block ends in `lengths`, and how many blocks the run holds.
    runs: Vec<(u32, u32)>,
    /// The packing's pieces and blocks, to lay it out again in vectors of exactly its size.
    pieces: usize,
    blocks: usize,
}

impl BlockRuns {
    /// `packing` as runs of equal blocks, or None where they would hold more than `MAX_KEPT`
    /// lengths or runs, or take more than a byte for `PIECES_PER_KEPT_BYTE` pieces.
    pub fn of(packing: &Packing) -> Result<Option<Self>> {
        Self::within(packing, packing.lengths.len() / PIECES_PER_KEPT_BYTE)
    }

    /// `of`, kept where the runs take at most `most_bytes`.
    fn within(packing: &Packing, most_bytes: usize) -> Result<Option<Self>> {
        let (lengths, ends) = (&packing.lengths, &packing.ends);
        let mut kept = BlockRuns {
            pieces: lengths.len(),
            blocks: ends.len(),
            ..BlockRuns::default()
        };
        let (mut block, mut start) = (0, 0);
        while block < ends.len() {
            let end = ends[block] as usize;
            let (held, runs) = (kept.lengths.len() + (end - start), kept.runs.len() + 1);
            let bytes = held * size_of::<u32>() + runs * size_of::<(u32, u32)>();
            if held > MAX_KEPT || runs > MAX_KEPT || bytes > most_bytes {
                return Ok(None);
            }
            for &length in &lengths[start..end] {
                try_push(&mut kept.lengths, KEPT, length)?;
            }
            let repeats = repeats_after(packing, block, start);
            try_push(
                &mut kept.runs,
                KEPT,
                (kept.lengths.len() as u32, 1 + repeats as u32),
            )?;
            block += 1 + repeats;
            start = end + repeats * (end - start);
        }
        // Held for the planner's life (and copied with it): no room to spare.
        kept.lengths.shrink_to_fit();
        kept.runs.shrink_to_fit();
        Ok(Some(kept))
    }

    /// The bytes the runs hold.
    pub fn bytes(&self) -> usize {
        self.lengths.capacity() * size_of::<u32>() + self.runs.capacity() * size_of::<(u32, u32)>()
    }

    /// The packing the runs were made of.
    pub fn packing(&self) -> Result<Packing> {
        let mut packing = Packing {
            lengths: try_with_capacity_huge("the packed lengths", self.pieces)?,
            ends: try_with_capacity_huge("the ends of the packed blocks", self.blocks)?,
        };
        let mut start = 0;
        for &(end, repeats) in &self.runs {
            packing
                .lengths
                .extend_from_slice(&self.lengths[start..end as usize]);
            packing.close_block();
            packing.repeat_last_block(repeats - 1);
            start = end as usize;
        }
        Ok(packing)
    }
}

/// How many blocks right after block `first` (from `start` in the lengths) are equal to it. The
/// next blocks are compared a doubling number at a time, each chunk of the lengths with the
/// chunk before it (already the block over and over) in one slice comparison, so that the
/// millions of blocks of a long run cost about a pass over memory, not a comparison each.
fn repeats_after(packing: &Packing, first: usize, start: usize) -> usize {
    let (lengths, ends) = (&packing.lengths, &packing.ends);
    let end = ends[first] as usize;
    let size = end - start;
    let (mut repeats, mut stride) = (0, 1);
    loop {
        let count = stride.min(ends.len() - (first + 1 + repeats));
        if count == 0 {
            return repeats;
        }
        // Blocks first + 1 + repeats .. + count, each `size` lengths ending where a repeat would.
        let (from, to) = (first + 1 + repeats, first + 1 + repeats + count);
        let evenly = ends[from..to]
            .iter()
            .zip(repeats + 1..)
            .fold(true, |even, (&at, k)| {
                even & (at as usize == end + k * size)
            });
        // `count` is at most `repeats + 1`, so the chunk before this one is within the run.
        let (lo, hi) = (end + repeats * size, end + (repeats + count) * size);
        if evenly && lengths[lo..hi] == lengths[lo - count * size..hi - count * size] {
            repeats += count;
            stride *= 2;
        } else if count == 1 {
            return repeats;
        } else {
            stride = 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn runs_lay_out_the_packing_they_were_made_of() {
        let blocks: &[&[u32]] = &[
            &[5, 3],
            &[5, 3],
            &[5, 3],
            &[8],
            &[],
            &[],
            &[5, 3],
            &[2, 2, 4],
        ];
        let original = Packing::of_blocks(blocks);
        let runs = BlockRuns::within(&original, usize::MAX).unwrap().unwrap();
        assert_eq!(runs.runs.len(), 5);
        assert_eq!(runs.lengths, [5, 3, 8, 5, 3, 2, 2, 4]);
        let again = runs.packing().unwrap();
        assert_eq!(
            (again.lengths, again.ends),
            (original.lengths, original.ends)
        );
        let empty = BlockRuns::within(&Packing::default(), usize::MAX)
            .unwrap()
            .unwrap();
        assert_eq!(empty.packing().unwrap().ends, Vec::<u32>::new());
    }

    #[test]
    fn runs_taking_more_than_a_byte_for_four_pieces_are_not_kept() {
        // One run of a block of 2 takes 16 bytes: over the 2 allowed 8 pieces, within the 16
        // allowed 64.
        let two: &[u32] = &[5, 3];
        assert!(BlockRuns::of(&Packing::of_blocks(&[two; 4]))
            .unwrap()
            .is_none());
        let kept = BlockRuns::of(&Packing::of_blocks(&[two; 32]))
            .unwrap()
            .unwrap();
        assert_eq!((kept.bytes(), kept.runs.len()), (16, 1));
    }

    #[test]
    fn a_packing_of_too_many_distinct_blocks_is_not_kept() {
        let mut many = Packing::default();
        for length in 0..=MAX_KEPT as u32 {
            many.lengths.push(length % 7 + length / 7 % 2);
            many.ends.push(many.lengths.len() as u32);
        }
        assert!(BlockRuns::within(&many, usize::MAX).unwrap().is_none());
        many.lengths.truncate(MAX_KEPT);
        many.ends.truncate(MAX_KEPT);
        assert!(BlockRuns::within(&many, usize::MAX).unwrap().is_some());
    }

    proptest! {
        /// Runs of blocks of 0 to 3 lengths, repeated 1 to 39 times (equal neighbours merge).
        #[test]
        fn runs_of_any_packing_lay_it_out_again(
            runs in prop::collection::vec(
                (prop::collection::vec(1u32..4, 0..4), 1usize..40), 0..30,
            ),
        ) {
            let mut blocks: Vec<&[u32]> = Vec::new();
            for (block, repeats) in &runs {
                blocks.extend(std::iter::repeat_n(block.as_slice(), *repeats));
            }
            let original = Packing::of_blocks(&blocks);
            let kept = BlockRuns::within(&original, usize::MAX).unwrap().unwrap();
            // As many runs as places where a block differs from the one before it.
            let changes = (0..blocks.len()).filter(|&b| b == 0 || blocks[b] != blocks[b - 1]);
            prop_assert_eq!(kept.runs.len(), changes.count());
            let again = kept.packing().unwrap();
            prop_assert_eq!((again.lengths, again.ends), (original.lengths, original.ends));
        }
    }
}
