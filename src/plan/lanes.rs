//! The `lanes` policy: recurrent state carried across batches.
//!
//! There are `G = world_size * blocks_per_batch` lanes; row `j` of rank `r`'s every batch is lane
//! `r * blocks_per_batch + j`. Each epoch the sequences are dealt to lanes so that the lanes'
//! lengths are as equal as possible, and each lane is its sequences end to end, in a random
//! order. Batch `k` holds steps `[k * t_max, (k + 1) * t_max)` of every lane, so a model that
//! keeps each row's state from one batch to the next sees every sequence whole, whatever its
//! length. Padding is only at the end of a lane.
//!
//! The plan is an ordinary [`EpochPlan`]: block `k * G + lane` is window `k` of the lane, which is
//! exactly the block the sharding gives row `lane % B` of rank `lane / B` in batch `k`. A window
//! boundary cuts a sequence into pieces, recorded as split pieces; a piece that continues its
//! sequence always opens its block, and the model carries its state into it.
//!
//! Which lane runs which sequences, in which order, is the deal (`deal/`); this file cuts the
//! lanes into windows, writing the blocks in their order.

use super::deal::{length_of, sequence_of};
use super::layout::Span;
use super::layout::SplitPiece;
use super::{EpochPlan, Planner};
use crate::alloc::{try_reserve, try_with_capacity};
use crate::error::{Error, Result};
use crate::prefetch::prefetch;
use crate::stats::{self, PlanStats};
use std::mem::MaybeUninit;

impl Planner {
    /// The `lanes` plan of `epoch` (see the module's comment).
    pub(super) fn plan_lanes(&self, epoch: u64) -> Result<EpochPlan> {
        let options = &self.options;
        let lanes = options.blocks_per_global_batch() as usize;
        let t_max = u64::from(options.t_max);
        // The most pieces a deal can give, which the deal leaves room for: a sequence each, and
        // one more for each window boundary that cuts one. The heaviest lane took its last
        // sequence when it was the lightest, so it holds at most its share and that sequence.
        let heaviest = self.steps / lanes as u64 + u64::from(self.longest);
        let most_blocks = heaviest.div_ceil(t_max).max(1).saturating_mul(lanes as u64);
        let room = self
            .lengths
            .len()
            .saturating_add(most_blocks.min(u64::from(u32::MAX)) as usize);
        let deal = super::deal::deal(
            &self.lengths,
            &self.counts,
            options.seed,
            epoch,
            lanes,
            room,
        )?;
        let longest_lane = deal.steps.iter().copied().max().unwrap_or(0);
        let windows = longest_lane.div_ceil(t_max).max(1);
        let blocks = windows * lanes as u64;
        if blocks > u64::from(u32::MAX) {
            return Err(too_many_blocks(blocks, options.t_max));
        }
        // Each window boundary cuts at most one sequence: at most one piece per block more (which
        // the deal left room for), and at most two pieces of split sequences per block (the cut
        // one's first and next).
        let most_pieces = self.lengths.len() + blocks as usize;
        let mut written = Windows {
            t_max,
            piece_sequences: deal.spare,
            split_pieces: try_with_capacity(
                "the pieces of split sequences",
                most_pieces.min(2 * blocks as usize),
            )?,
            spans: try_with_capacity("the plan's blocks", blocks as usize)?,
            split_sequences: 0,
            empty_blocks: 0,
        };
        try_reserve(
            &mut written.piece_sequences,
            "the plan's pieces",
            most_pieces,
        )?;
        written.all(&deal.order, &deal.starts, windows as usize)?;
        let Windows {
            piece_sequences,
            split_pieces,
            spans,
            split_sequences,
            empty_blocks,
            ..
        } = written;
        let pieces_of_split = split_pieces.len() as u64;
        let padding = blocks * t_max - self.steps;
        let stats = PlanStats {
            sequences: self.lengths.len() as u64,
            steps: self.steps,
            pieces: piece_sequences.len() as u64,
            blocks,
            padding,
            deleted: 0,
            split_sequences,
            split_pieces: pieces_of_split,
            rounding_blocks: 0,
            rounding_padding: 0,
            empty_blocks,
            efficiency: stats::efficiency(self.steps, 0, padding),
            lower_bound: self.lower_bound,
            // Measured when the stats are first read (`EpochPlan::stats`).
            rank_cost_imbalance: Default::default(),
        };
        Ok(EpochPlan {
            epoch,
            options: options.clone(),
            lengths: self.lengths.clone(),
            piece_sequences: piece_sequences.into(),
            split_pieces: split_pieces.into(),
            spans: spans.into(),
            stats,
            measured: std::sync::OnceLock::new(),
            origin: super::resume::Origin::own(options.world_size),
        })
    }
}

/// A lanes plan as it is written, in block order: window 0 of every lane, then window 1, and so
/// on (so that every array is written in order; a block's pieces lie anywhere, and the plan reads
/// them through its span).
struct Windows {
    t_max: u64,
    piece_sequences: Vec<u32>,
    /// In position order.
    split_pieces: Vec<SplitPiece>,
    spans: Vec<Span>,
    split_sequences: u64,
    /// Blocks past the end of their lane (counted as written, rather than in a pass after).
    empty_blocks: u64,
}

/// Where a lane stands as its windows are written: its next sequence in the deal's order, the
/// end of its sequences, and what is left of a sequence cut at its last window's end (its
/// steps from `cut_offset`, `cut_left` of them; none when 0).
#[derive(Clone, Copy)]
struct Lane {
    at: usize,
    end: usize,
    cut_sequence: u32,
    cut_offset: u32,
    cut_left: u32,
}

impl Windows {
    /// The `windows` windows of every lane, lane `l` being `order[starts[l]..starts[l + 1]]` end
    /// to end. Piece positions are checked where a window ends: those in it are smaller.
    fn all(&mut self, order: &[u64], starts: &[usize], windows: usize) -> Result<()> {
        let count = starts.len() - 1;
        let mut lanes = try_with_capacity("where every lane stands", count)?;
        lanes.extend(starts.windows(2).map(|lane| Lane {
            at: lane[0],
            end: lane[1],
            cut_sequence: 0,
            cut_offset: 0,
            cut_left: 0,
        }));
        for _ in 0..windows {
            for lane in &mut lanes {
                let start = self.piece_sequences.len();
                self.window(lane, order)?;
                let end = piece_position(self.piece_sequences.len())?;
                // Past the end of its lane, a block of padding: no pieces, as in any plan.
                let span = if end as usize == start {
                    self.empty_blocks += 1;
                    Span { start: 0, end: 0 }
                } else {
                    Span {
                        start: start as u32,
                        end,
                    }
                };
                debug_assert!(self.spans.len() < self.spans.capacity());
                self.spans.push(span);
            }
        }
        Ok(())
    }

    /// The next window of `lane`: the rest of a cut sequence (as much as fits), whole sequences
    /// as long as they fit, then the first piece of the next one if it runs past the window's end.
    #[inline(always)]
    fn window(&mut self, lane: &mut Lane, order: &[u64]) -> Result<()> {
        let t_max = self.t_max;
        let mut used = 0;
        if lane.cut_left > 0 {
            let take = t_max.min(u64::from(lane.cut_left));
            self.split_piece(lane.cut_sequence, u64::from(lane.cut_offset), take)?;
            // `take` is at most `cut_left`, a u32.
            lane.cut_offset += take as u32;
            lane.cut_left -= take as u32;
            used = take;
        }
        // The lanes are read side by side, more streams than the processor follows on its own.
        prefetch(order, lane.at + 16);
        let rest = &order[lane.at..lane.end];
        // Every sequence left in the lane is a piece to come, which the room left for the plan's
        // pieces holds (sized for the most there can be): reserved here only if that were wrong.
        if self.piece_sequences.spare_capacity_mut().len() < rest.len() {
            try_reserve(&mut self.piece_sequences, "the plan's pieces", rest.len())?;
        }
        let written = self.piece_sequences.len();
        let places = &mut self.piece_sequences.spare_capacity_mut()[..rest.len()];
        let (whole, steps) = whole_fitting(rest, t_max - used, places);
        // SAFETY: `whole_fitting` wrote the first `whole` of the spare places.
        unsafe { self.piece_sequences.set_len(written + whole) };
        used += steps;
        lane.at += whole;
        if used < t_max && whole < rest.len() {
            let (sequence, length) = (sequence_of(rest[whole]), length_of(rest[whole]));
            lane.at += 1;
            self.split_sequences += 1;
            let take = t_max - used;
            self.split_piece(sequence, 0, take)?;
            // Cut: `take` is less than `length`, a u32.
            (lane.cut_sequence, lane.cut_offset) = (sequence, take as u32);
            lane.cut_left = length - take as u32;
        }
        Ok(())
    }

    /// A piece of a cut sequence: `length` steps from `offset`.
    #[inline(always)]
    fn split_piece(&mut self, sequence: u32, offset: u64, length: u64) -> Result<()> {
        debug_assert!(self.split_pieces.len() < self.split_pieces.capacity());
        self.split_pieces.push(SplitPiece {
            position: piece_position(self.piece_sequences.len())?,
            offset: offset as u32,
            length: length as u32,
        });
        self.piece_sequences.push(sequence);
        Ok(())
    }
}

/// The sequences a window takes whole are counted `CHUNK` at a time, without a branch on
/// each: where a window ends depends on the lengths, which the processor cannot predict, so a
/// branch per sequence cost a mispredicted branch per block (about 3 ms in 37 of cutting the
/// windows at 5M sequences, 25 ms at 50M; BENCHMARKS.md, issue 26, fifth pass).
const CHUNK: usize = 8;

/// How many of `rest`'s sequences, from the first, fit end to end in `budget` steps, and their
/// steps. Their sequences are written to the first places of `places` (as long as `rest`); the
/// places after them may be written too.
#[inline(always)]
fn whole_fitting(rest: &[u64], budget: u64, places: &mut [MaybeUninit<u32>]) -> (usize, u64) {
    let (mut whole, mut steps) = (0, 0);
    let mut chunks = rest.chunks_exact(CHUNK);
    let mut chunk_places = places.chunks_exact_mut(CHUNK);
    for (chunk, places) in (&mut chunks).zip(&mut chunk_places) {
        // The steps up to each sequence only grow, so those within the budget are the first.
        let (mut fit, mut total) = (0, steps);
        for (&pair, place) in chunk.iter().zip(places) {
            place.write(sequence_of(pair));
            total += u64::from(length_of(pair));
            let fits = total <= budget;
            fit += usize::from(fits);
            steps = if fits { total } else { steps };
        }
        whole += fit;
        if fit < CHUNK {
            return (whole, steps);
        }
    }
    let rest = chunks.remainder().iter().zip(chunk_places.into_remainder());
    for (&pair, place) in rest {
        let length = u64::from(length_of(pair));
        if steps + length > budget {
            break;
        }
        place.write(sequence_of(pair));
        steps += length;
        whole += 1;
    }
    (whole, steps)
}

/// A piece's position in the plan, which plans keep in 32 bits.
fn piece_position(position: usize) -> Result<u32> {
    u32::try_from(position).map_err(|_| {
        Error::invalid(
            "pieces",
            position,
            format!(
                "at most {} pieces per epoch (plans use 32-bit piece positions); raise t_max \
                 to cut sequences at fewer window boundaries",
                u32::MAX
            ),
        )
    })
}

/// The error for an epoch of more blocks than plans address.
pub(super) fn too_many_blocks(blocks: u64, t_max: u32) -> Error {
    Error::invalid(
        "t_max",
        t_max,
        format!(
            "a block size that gives at most {} blocks per epoch (plans use 32-bit positions); \
             these lengths need {blocks}",
            u32::MAX
        ),
    )
}

/// The fewest blocks any lanes plan can have: every lane runs as many windows as the longest,
/// which holds at least its share of the steps and at least the longest sequence.
pub(super) fn lanes_bound(steps: u64, longest: u32, options: &crate::Options) -> u64 {
    let lanes = options.blocks_per_global_batch();
    let t_max = u64::from(options.t_max);
    let windows = steps
        .div_ceil(lanes * t_max)
        .max(u64::from(longest).div_ceil(t_max));
    lanes * windows.max(1)
}

#[cfg(test)]
mod tests {
    use super::super::deal::pair;
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// `whole_fitting` takes what a loop over each sequence in turn takes, on runs shorter
        /// and longer than its chunks.
        #[test]
        fn whole_fitting_takes_the_sequences_that_fit_in_turn(
            lengths in prop::collection::vec(1u32..300, 0..40),
            budget in 0u64..3000,
        ) {
            let rest: Vec<u64> = (100..).zip(&lengths).map(|(s, &l)| pair(s, l)).collect();
            let (mut whole, mut steps) = (0, 0);
            while whole < rest.len() && steps + u64::from(lengths[whole]) <= budget {
                steps += u64::from(lengths[whole]);
                whole += 1;
            }
            let mut places = vec![MaybeUninit::new(0u32); rest.len()];
            prop_assert_eq!(whole_fitting(&rest, budget, &mut places), (whole, steps));
            // SAFETY: every place was initialized above.
            let written: Vec<u32> = places[..whole].iter().map(|p| unsafe { p.assume_init() }).collect();
            prop_assert_eq!(written, (100..100 + whole as u32).collect::<Vec<_>>());
        }
    }
}
