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
    /// lengths or runs.
    pub fn of(packing: &Packing) -> Result<Option<Self>> {
        let (lengths, ends) = (&packing.lengths, &packing.ends);
        let mut kept = BlockRuns {
            pieces: lengths.len(),
            blocks: ends.len(),
            ..BlockRuns::default()
        };
        let (mut block, mut start) = (0, 0);
        while block < ends.len() {
            let end = ends[block] as usize;
            if kept.lengths.len() + (end - start) > MAX_KEPT || kept.runs.len() == MAX_KEPT {
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
        Ok(Some(kept))
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
        let runs = BlockRuns::of(&original).unwrap().unwrap();
        assert_eq!(runs.runs.len(), 5);
        assert_eq!(runs.lengths, [5, 3, 8, 5, 3, 2, 2, 4]);
        let again = runs.packing().unwrap();
        assert_eq!(
            (again.lengths, again.ends),
            (original.lengths, original.ends)
        );
        let empty = BlockRuns::of(&Packing::default()).unwrap().unwrap();
        assert_eq!(empty.packing().unwrap().ends, Vec::<u32>::new());
    }

    #[test]
    fn a_packing_of_too_many_distinct_blocks_is_not_kept() {
        let mut many = Packing::default();
        for length in 0..=MAX_KEPT as u32 {
            many.lengths.push(length % 7 + length / 7 % 2);
            many.ends.push(many.lengths.len() as u32);
        }
        assert!(BlockRuns::of(&many).unwrap().is_none());
        many.lengths.truncate(MAX_KEPT);
        many.ends.truncate(MAX_KEPT);
        assert!(BlockRuns::of(&many).unwrap().is_some());
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
            let kept = BlockRuns::of(&original).unwrap().unwrap();
            // As many runs as places where a block differs from the one before it.
            let changes = (0..blocks.len()).filter(|&b| b == 0 || blocks[b] != blocks[b - 1]);
            prop_assert_eq!(kept.runs.len(), changes.count());
            let again = kept.packing().unwrap();
            prop_assert_eq!((again.lengths, again.ends), (original.lengths, original.ends));
        }
    }
}
