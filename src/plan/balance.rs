//! Dealing blocks to ranks by what they cost to compute (the `cost` option), and measuring how
//! evenly a plan spreads that cost.
//!
//! DDP ranks step together, so each global batch takes as long as its costliest rank. With
//! `cost = steps` every block counts `t_max` steps alike and blocks are dealt in their shuffled
//! order (`shard.rs`), as they always were. With `attention:A`, a piece of `L` steps costs
//! `A * L + L^2`, so a block of one long sequence costs many times a block of many short ones.
//! Then:
//!
//! 1. The blocks, in their shuffled order, are sorted by cost (stable: blocks of equal cost keep
//!    their shuffled order) and cut into global batches of `world_size * blocks_per_batch`
//!    blocks: blocks of like cost share a global batch. With one block per rank, no dealing
//!    inside a global batch could help otherwise.
//! 2. Inside each global batch, the costliest block goes to the rank that costs least so far and
//!    still has room (longest processing time first), ties to the lowest rank, and the ranks are
//!    then rotated by a random offset, so no rank is always the costliest.
//! 3. The global batches are shuffled.
//!
//! Only positions move: every block is still served once, every rank still runs the same
//! number of batches of `blocks_per_batch` blocks, and all choices are drawn from the plan's
//! ChaCha stream for (seed, epoch), so every rank computes the same deal.

use super::layout::Span;
use super::EpochPlan;
use crate::alloc::{try_vec, try_with_capacity};
use crate::error::Result;
use crate::options::Cost;
use crate::prefetch::prefetch;
use crate::rng::{PlanRng, Stream};
use crate::stats::Imbalance;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Blocks ahead of the one being costed whose lengths are fetched (see `block_costs`).
const COST_AHEAD: usize = 16;

impl EpochPlan {
    /// What the block at `position` costs under `cost`.
    fn block_cost(&self, position: usize, cost: Cost) -> u64 {
        self.block_at(position)
            .pieces()
            .map(|piece| cost.of_piece(piece.length))
            .fold(0, u64::saturating_add)
    }

    /// What each block costs under `cost`, in epoch order. A block's sequence numbers lie at a
    /// random place of the plan (the blocks are shuffled) and each one's length at a random
    /// place of the lengths, so costing one block after another waited for memory about twice a
    /// piece: measuring a 10M-sequence plan's imbalance took 3.3 times planning it. The blocks
    /// ahead are fetched instead, their sequence numbers `2 * COST_AHEAD` blocks on and their
    /// lengths `COST_AHEAD` on; hints only, which change no result.
    fn block_costs(&self, cost: Cost) -> impl Iterator<Item = u64> + '_ {
        let (sequences, lengths) = (&self.piece_sequences[..], &self.lengths[..]);
        (0..self.spans.len()).map(move |position| {
            if let Some(span) = self.spans.get(position + 2 * COST_AHEAD) {
                // A block's numbers may straddle two cache lines.
                prefetch(sequences, span.start as usize);
                prefetch(sequences, (span.end as usize).saturating_sub(1));
            }
            if let Some(span) = self.spans.get(position + COST_AHEAD) {
                for &index in &sequences[span.start as usize..span.end as usize] {
                    prefetch(lengths, index as usize);
                }
            }
            self.block_cost(position, cost)
        })
    }

    /// Rearranges the shuffled blocks as the module says, when the plan's cost is not `steps`.
    pub(super) fn deal_by_cost(&mut self) -> Result<()> {
        let cost = self.options.cost;
        if cost == Cost::Steps {
            return Ok(());
        }
        let blocks = self.spans.len();
        let ranks = self.options.world_size as usize;
        let per_rank = self.options.blocks_per_batch as usize;
        let per_global = ranks * per_rank;
        let mut costs = try_with_capacity("the cost of each block", blocks)?;
        costs.extend(self.block_costs(cost));
        let mut by_cost = try_with_capacity("the blocks sorted by cost", blocks)?;
        by_cost.extend(0..blocks as u32);
        by_cost.sort_by_key(|&position| Reverse(costs[position as usize]));

        let mut rng = PlanRng::new(self.options.seed, self.epoch, Stream::CostDeal);
        let globals = blocks / per_global;
        let mut global_order = try_with_capacity("the order of the global batches", globals)?;
        global_order.extend(0..globals as u32);
        rng.shuffle(&mut global_order);

        let mut dealt: Vec<Span> = try_with_capacity("the blocks dealt by cost", blocks)?;
        let mut slots = try_vec(
            "one global batch's blocks",
            per_global,
            Span { start: 0, end: 0 },
        )?;
        let mut filled = try_vec("the blocks of each rank", ranks, 0usize)?;
        let mut least_loaded = BinaryHeap::new();
        least_loaded
            .try_reserve(ranks)
            .map_err(|_| crate::alloc::out_of_memory::<(u64, usize)>("the ranks' costs", ranks))?;
        for &global in &global_order {
            let members = &by_cost[global as usize * per_global..][..per_global];
            filled.fill(0);
            least_loaded.clear();
            least_loaded.extend((0..ranks).map(|rank| Reverse((0u64, rank))));
            for &position in members {
                // A rank leaves the heap when full, and there are as many slots as blocks.
                let Some(Reverse((load, rank))) = least_loaded.pop() else {
                    break;
                };
                slots[rank * per_rank + filled[rank]] = self.spans[position as usize];
                filled[rank] += 1;
                if filled[rank] < per_rank {
                    let load = load.saturating_add(costs[position as usize]);
                    least_loaded.push(Reverse((load, rank)));
                }
            }
            let offset = rng.below(ranks as u32) as usize * per_rank;
            dealt.extend_from_slice(&slots[offset..]);
            dealt.extend_from_slice(&slots[..offset]);
        }
        self.spans = dealt.into();
        Ok(())
    }

    /// How evenly this plan spreads `cost` over its ranks: per global batch, the costliest
    /// rank's cost over the mean rank's (1 where all cost nothing), with its mean and its worst
    /// over the global batches. Any cost may be asked of any plan: a `steps` plan measured in
    /// `attention:A` shows what dealing by cost would save.
    pub fn rank_cost_imbalance(&self, cost: Cost) -> Imbalance {
        let ranks = self.options.world_size as usize;
        let per_rank = self.options.blocks_per_batch as usize;
        let globals = self.batches_per_rank();
        // One rank is its own mean: every ratio below is exactly 1, so skip expanding every
        // block (the pass costs about as much as planning the epoch).
        if globals == 0 || ranks == 1 {
            return Imbalance::default();
        }
        let (mut total, mut worst) = (0.0, 0.0f64);
        // Blocks in epoch order: each global batch's ranks in turn, `per_rank` blocks each.
        let mut costs = self.block_costs(cost);
        for _ in 0..globals {
            let (mut sum, mut most) = (0u128, 0u64);
            for _ in 0..ranks {
                let rank_cost = costs.by_ref().take(per_rank).fold(0, u64::saturating_add);
                sum += u128::from(rank_cost);
                most = most.max(rank_cost);
            }
            let ratio = if sum == 0 {
                1.0
            } else {
                most as f64 * ranks as f64 / sum as f64
            };
            total += ratio;
            worst = worst.max(ratio);
        }
        Imbalance {
            mean: total / globals as f64,
            worst,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::options::{Cost, Options, Oversize};
    use crate::plan::Planner;

    /// Lengths whose blocks cost very unlike amounts under attention: a few long sequences among
    /// many short ones (as documents are).
    fn skewed() -> Vec<u32> {
        (0..3000u32)
            .map(|i| match i % 50 {
                0 => 900 + (i * 7) % 124,
                1..=5 => 200 + (i * 13) % 300,
                _ => 8 + (i * 31) % 90,
            })
            .collect()
    }

    fn options(cost: Cost, blocks_per_batch: u32) -> Options {
        let mut options = Options::new(1024);
        options.world_size = 8;
        options.blocks_per_batch = blocks_per_batch;
        options.seed = 3;
        options.oversize = Oversize::Split;
        options.cost = cost;
        options
    }

    /// Each piece of each sequence, as (sequence, offset, length), sorted.
    fn pieces(plan: &crate::plan::EpochPlan) -> Vec<(u32, u32, u32)> {
        let mut pieces: Vec<_> = plan
            .blocks()
            .flat_map(|block| block.pieces().collect::<Vec<_>>())
            .map(|piece| (piece.index, piece.offset, piece.length))
            .collect();
        pieces.sort_unstable();
        pieces
    }

    #[test]
    fn dealing_by_cost_serves_the_same_blocks_once_and_evens_the_ranks() {
        let attention = Cost::Attention { linear: 1 };
        for blocks_per_batch in [1, 4] {
            let by_steps = Planner::new(skewed(), options(Cost::Steps, blocks_per_batch)).unwrap();
            let by_cost = Planner::new(skewed(), options(attention, blocks_per_batch)).unwrap();
            let (before, after) = (by_steps.plan(2).unwrap(), by_cost.plan(2).unwrap());
            // The same blocks (the packing does not depend on the cost), each served once.
            assert_eq!(after.num_blocks(), before.num_blocks());
            assert_eq!(pieces(&after), pieces(&before));
            let mut spans_before = before.spans.to_vec();
            let mut spans_after = after.spans.to_vec();
            spans_before.sort_unstable_by_key(|span| (span.start, span.end));
            spans_after.sort_unstable_by_key(|span| (span.start, span.end));
            assert_eq!(spans_after, spans_before);
            assert_eq!(after.stats().padding, before.stats().padding);
            // Every rank the same number of batches of the same shape.
            for rank in 0..8 {
                let batches = after.rank_batches(rank).unwrap();
                assert_eq!(batches.len(), before.batches_per_rank());
            }
            let unbalanced = before.rank_cost_imbalance(attention);
            let balanced = after.rank_cost_imbalance(attention);
            assert!(unbalanced.mean > 1.3, "{unbalanced:?}");
            assert!(balanced.mean < 1.1, "{balanced:?} against {unbalanced:?}");
            assert!(balanced.worst < unbalanced.worst);
            // The stats report the plan's own cost.
            assert_eq!(after.stats().rank_cost_imbalance, balanced);
            assert_eq!(
                before.stats().rank_cost_imbalance,
                before.rank_cost_imbalance(Cost::Steps)
            );
        }
    }

    #[test]
    fn dealing_by_cost_depends_on_seed_and_epoch_alone() {
        let planner = Planner::new(skewed(), options(Cost::Attention { linear: 64 }, 1)).unwrap();
        let plan = planner.plan(4).unwrap();
        let again = Planner::new(skewed(), options(Cost::Attention { linear: 64 }, 1)).unwrap();
        assert_eq!(again.plan(4).unwrap().hash(), plan.hash());
        assert_eq!(again.plan(4).unwrap().spans, plan.spans);
        // Another epoch or seed, another order of global batches.
        assert_ne!(planner.plan(5).unwrap().hash(), plan.hash());
        let mut reseeded = options(Cost::Attention { linear: 64 }, 1);
        reseeded.seed = 4;
        let reseeded = Planner::new(skewed(), reseeded).unwrap().plan(4).unwrap();
        assert_ne!(reseeded.hash(), plan.hash());
        // Dealing by cost changes the plan of dealing by steps.
        let steps = Planner::new(skewed(), options(Cost::Steps, 1)).unwrap();
        assert_ne!(steps.plan(4).unwrap().hash(), plan.hash());
    }

    #[test]
    fn steps_leaves_the_plan_as_it_was() {
        // `steps` is the default: the same plan as options that never named a cost.
        let mut plain = options(Cost::Steps, 2);
        plain.cost = Cost::default();
        let a = Planner::new(skewed(), plain).unwrap().plan(1).unwrap();
        let b = Planner::new(skewed(), options(Cost::Steps, 2))
            .unwrap()
            .plan(1)
            .unwrap();
        assert_eq!(a.spans, b.spans);
    }

    #[test]
    fn an_even_plan_measures_one() {
        // Every block one sequence of a block's length: every rank costs the same.
        let planner =
            Planner::new(vec![1024; 64], options(Cost::Attention { linear: 1 }, 2)).unwrap();
        let imbalance = planner.plan(0).unwrap().stats().rank_cost_imbalance;
        assert_eq!((imbalance.mean, imbalance.worst), (1.0, 1.0));
    }
}
