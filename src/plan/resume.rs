//! Resuming an epoch part-way, with the same world size or another.
//!
//! A sampler saved after its ranks served some batches must, when loaded, serve exactly the
//! steps not yet served, each once, with the same batch count on every rank. A job restarted on
//! more or fewer machines has another world size, and that world size's own plan of the epoch
//! orders the blocks differently (rounding and shuffling depend on it), so the rest of the epoch
//! cannot be a position in it. The rest is instead the blocks of the plan being served, from the
//! first one not yet served, in the same order, dealt to the new ranks as any plan is
//! (`shard.rs`) and padded with empty blocks to whole global batches.
//!
//! An [`EpochPosition`] says where the ranks stand in terms that survive any number of such
//! restarts: the epoch's plan for `planned_world_size` ranks, the block of it that the plan being
//! served starts at, and the batches each of that plan's `world_size` ranks has served.

use super::layout::Span;
use super::{EpochPlan, Planner};
use crate::alloc::{try_copy, try_reserve};
use crate::error::{Error, Result};
use crate::stats;

/// Where every rank stands in an epoch. A plan of its own ([`Planner::plan`]) has
/// `planned_world_size == world_size` and `first_block == 0`; a resumed one
/// ([`Planner::resume`]) serves the blocks of the epoch's plan for `planned_world_size` ranks from
/// `first_block` on, dealt to `world_size` ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochPosition {
    pub epoch: u64,
    /// The world size whose plan of the epoch gives the order of its blocks.
    pub planned_world_size: u32,
    /// Blocks of that plan served before the plan being served started.
    pub first_block: u64,
    /// Ranks of the plan being served.
    pub world_size: u32,
    /// Blocks in each of their batches: with `world_size`, the lane count of a lanes plan.
    pub blocks_per_batch: u32,
    /// Batches each of them has served.
    pub batches: u64,
}

/// A plan's place in its epoch: what [`EpochPosition`] says besides the batches served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Origin {
    pub(super) planned_world_size: u32,
    pub(super) first_block: u64,
}

impl Origin {
    /// A plan of its own: its blocks are its world size's plan from the start.
    pub(super) fn own(world_size: u32) -> Self {
        Origin {
            planned_world_size: world_size,
            first_block: 0,
        }
    }
}

/// An epoch to go on with: the plan to serve, and the batches of it each rank has served.
#[derive(Debug, Clone)]
pub struct Resumed {
    pub plan: EpochPlan,
    pub batches: usize,
}

impl EpochPlan {
    /// Where the ranks stand once each has served `batches` batches of this plan: what a sampler
    /// saves, for [`Planner::resume`] to go on from.
    pub fn position(&self, batches: usize) -> Result<EpochPosition> {
        let per_rank = self.batches_per_rank();
        if batches > per_rank {
            return Err(Error::invalid(
                "batches",
                batches,
                format!(
                    "from 0 to {per_rank}, the batches per rank of epoch {}",
                    self.epoch
                ),
            ));
        }
        Ok(EpochPosition {
            epoch: self.epoch,
            planned_world_size: self.origin.planned_world_size,
            first_block: self.origin.first_block,
            world_size: self.options.world_size,
            blocks_per_batch: self.options.blocks_per_batch,
            batches: batches as u64,
        })
    }
}

impl Planner {
    /// The rest of an epoch from `at`, for this planner's world size (the other options, but
    /// for `blocks_per_batch`, which `at` holds and this checks, must be those `at` was saved
    /// with; the caller checks that).
    ///
    /// With the world size `at` was saved with, it is the same plan, with `at.batches` batches of
    /// it served: the same batches come next. With another, it is the blocks not yet served, in
    /// their order, re-dealt to this planner's ranks and padded with empty blocks to a multiple
    /// of `world_size * blocks_per_batch`, with none of its batches served; every rank gets the
    /// same number of batches. Its stats are those of the plan whose blocks it serves, plus the
    /// empty blocks it adds (in `blocks`, `padding`, `rounding_blocks`, `rounding_padding` and
    /// `empty_blocks`): every padded step of the epoch is counted.
    ///
    /// A lanes plan (the policy carries state) instead resumes with its lane count,
    /// `world_size * blocks_per_batch`, whatever its factors: its lanes, and so its blocks,
    /// depend on the count alone, and rank `r` of the new plan goes on with lanes
    /// `r * blocks_per_batch ..` from the same batch. Other policies resume with the blocks per
    /// batch they saved.
    ///
    /// Errors name the field of `at` and its real bounds.
    pub fn resume(&self, at: &EpochPosition) -> Result<Resumed> {
        self.check_resumable(at)?;
        if self.options.policy.carries_state() {
            return self.resume_lanes(at);
        }
        let planned = self.plan_for(at.epoch, at.planned_world_size)?;
        let blocks = planned.num_blocks() as u64;
        if at.first_block > blocks {
            return Err(Error::invalid(
                "first_block",
                at.first_block,
                format!(
                    "from 0 to {blocks}, the blocks of epoch {}'s plan for {} ranks",
                    at.epoch, at.planned_world_size
                ),
            ));
        }
        let mut saved_options = self.options.clone();
        saved_options.world_size = at.world_size;
        saved_options.validate()?;
        let per_global_batch = saved_options.blocks_per_global_batch();
        let batches_then = (blocks - at.first_block).div_ceil(per_global_batch);
        if at.batches > batches_then {
            return Err(Error::invalid(
                "batches",
                at.batches,
                format!(
                    "from 0 to {batches_then}, the batches per rank of epoch {} on {} ranks \
                     from block {} of its plan for {} ranks",
                    at.epoch, at.world_size, at.first_block, at.planned_world_size
                ),
            ));
        }
        if at.world_size == self.options.world_size {
            return Ok(Resumed {
                plan: self.remainder(planned, at.first_block)?,
                batches: at.batches as usize,
            });
        }
        // Past the planned blocks lie only the empty blocks that padded the last global batch.
        let served = (at.first_block + at.batches * per_global_batch).min(blocks);
        Ok(Resumed {
            plan: self.remainder(planned, served)?,
            batches: 0,
        })
    }

    /// What [`Planner::resume`] checks of `at` before planning anything: the blocks per batch
    /// it keeps (the lane count, for lanes), and that a lanes epoch was never re-dealt. A rank
    /// that maps a resumed plan another rank wrote checks this much itself (`shared/`).
    pub(super) fn check_resumable(&self, at: &EpochPosition) -> Result<()> {
        if !self.options.policy.carries_state() {
            if at.blocks_per_batch != self.options.blocks_per_batch {
                return Err(Error::invalid(
                    "blocks_per_batch",
                    self.options.blocks_per_batch,
                    format!(
                        "{}, the blocks per batch the epoch was saved with (only the lanes policy \
                         resumes with others, keeping world_size * blocks_per_batch)",
                        at.blocks_per_batch
                    ),
                ));
            }
            return Ok(());
        }
        let lanes = self.options.blocks_per_global_batch();
        let saved_lanes = u64::from(at.world_size) * u64::from(at.blocks_per_batch);
        if saved_lanes != lanes {
            // Each row is a lane whose state the model carries: another lane count would deal
            // the rest of the epoch to rows with no state for it.
            return Err(Error::invalid(
                "world_size * blocks_per_batch",
                format!(
                    "{} * {} = {lanes}",
                    self.options.world_size, self.options.blocks_per_batch
                ),
                format!(
                    "{saved_lanes} ({} * {}), the lane count the epoch was saved with: with the \
                     lanes policy a run resumes only with the lane count it saved, as the model's \
                     state is per lane",
                    at.world_size, at.blocks_per_batch
                ),
            ));
        }
        if (at.planned_world_size, at.first_block) != (at.world_size, 0) {
            return Err(Error::invalid(
                "planned_world_size, first_block",
                format!("{}, {}", at.planned_world_size, at.first_block),
                format!(
                    "{}, 0: a lanes epoch is never re-dealt, so its plan is its own",
                    at.world_size
                ),
            ));
        }
        Ok(())
    }

    /// [`Planner::resume`] of a lanes plan (`at` checked): the same lanes, from the same batch.
    fn resume_lanes(&self, at: &EpochPosition) -> Result<Resumed> {
        let plan = self.plan(at.epoch)?;
        // The same plan, so the same bound as where `at` was taken: position's own check.
        let batches = usize::try_from(at.batches).unwrap_or(usize::MAX);
        plan.position(batches)?;
        Ok(Resumed { plan, batches })
    }

    /// The epoch's plan for `world_size` ranks (this planner's own, or one for another world
    /// size, checked against these lengths).
    fn plan_for(&self, epoch: u64, world_size: u32) -> Result<EpochPlan> {
        if world_size == self.options.world_size {
            return self.plan(epoch);
        }
        let mut options = self.options.clone();
        options.world_size = world_size;
        let mut planner = Planner::new(
            try_copy(
                "the lengths, for the saved world size's plan",
                &self.lengths,
            )?,
            options,
        )
        .map_err(|mut error| {
            // Only the world size can be wrong: the rest was checked when `self` was made.
            error.argument = error.argument.replace("world_size", "planned_world_size");
            error
        })?;
        planner.mixture = self.mixture.clone();
        planner.plan(epoch)
    }

    /// The blocks of `planned` from `first_block` on, dealt to this planner's ranks.
    fn remainder(&self, mut planned: EpochPlan, first_block: u64) -> Result<EpochPlan> {
        let origin = Origin {
            planned_world_size: planned.options.world_size,
            first_block,
        };
        if origin == Origin::own(self.options.world_size) {
            return Ok(planned);
        }
        let spans = planned.spans.vec("the plan's blocks")?;
        spans.drain(..first_block as usize);
        let kept = spans.len() as u64;
        let blocks = stats::round_up(kept, self.options.blocks_per_global_batch());
        let added = blocks - kept;
        // More ranks may need more blocks than the plan had room for.
        try_reserve(spans, "the plan's blocks", added as usize)?;
        spans.resize(blocks as usize, Span { start: 0, end: 0 });
        let added_padding = added * u64::from(self.options.t_max);
        let stats = &mut planned.stats;
        stats.blocks += added;
        stats.padding += added_padding;
        stats.rounding_blocks += added;
        stats.rounding_padding += added_padding;
        stats.empty_blocks += added;
        stats.efficiency = stats::efficiency(stats.steps, stats.deleted, stats.padding);
        planned.options = self.options.clone();
        // Its imbalance is its own deal's, measured when read.
        planned.measured = std::sync::OnceLock::new();
        planned.origin = origin;
        Ok(planned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Options;

    fn planner(world_size: u32, blocks_per_batch: u32) -> Planner {
        let mut options = Options::new(10);
        options.world_size = world_size;
        options.blocks_per_batch = blocks_per_batch;
        options.seed = 4;
        let lengths = (0..97).map(|i| 1 + (i * 7) % 10).collect();
        Planner::new(lengths, options).unwrap()
    }

    fn at(epoch: u64, world_size: u32, batches: u64) -> EpochPosition {
        EpochPosition {
            epoch,
            planned_world_size: world_size,
            first_block: 0,
            world_size,
            blocks_per_batch: 2,
            batches,
        }
    }

    #[test]
    fn the_same_world_size_goes_on_with_the_same_plan() {
        let planner = planner(3, 2);
        let plan = planner.plan(1).unwrap();
        let resumed = planner.resume(&plan.position(4).unwrap()).unwrap();
        assert_eq!(resumed.batches, 4);
        assert_eq!(resumed.plan.hash(), plan.hash());
        assert_eq!(resumed.plan.stats(), plan.stats());
        assert_eq!(resumed.plan.position(4).unwrap(), at(1, 3, 4));
    }

    #[test]
    fn another_world_size_gets_the_blocks_not_served_in_their_order() {
        let (three, two) = (planner(3, 2), planner(2, 2));
        let plan = three.plan(1).unwrap();
        let resumed = two.resume(&at(1, 3, 4)).unwrap();
        assert_eq!(resumed.batches, 0);
        let rest = &resumed.plan;
        let kept = plan.num_blocks() - 4 * 6;
        assert_eq!(rest.num_blocks(), kept.div_ceil(4) * 4);
        for position in 0..rest.num_blocks() {
            let got: Vec<_> = rest.block_at(position).pieces().collect();
            if position < kept {
                let expected: Vec<_> = plan.block_at(4 * 6 + position).pieces().collect();
                assert_eq!(got, expected, "block {position}");
            } else {
                assert!(got.is_empty(), "block {position}");
            }
        }
        let added = (rest.num_blocks() - kept) as u64;
        let (before, after) = (plan.stats(), rest.stats());
        assert_eq!(after.blocks, before.blocks + added);
        assert_eq!(after.padding, before.padding + added * 10);
        assert_eq!(after.empty_blocks, before.empty_blocks + added);
        assert_eq!(after.padding, after.blocks * 10 - after.steps);
        // Saved again, it names the same origin: 3 ranks' plan from block 24.
        let position = rest.position(1).unwrap();
        assert_eq!((position.planned_world_size, position.first_block), (3, 24));
        assert_eq!((position.world_size, position.batches), (2, 1));
    }

    #[test]
    fn a_finished_epoch_resumes_with_nothing_left() {
        let (three, two) = (planner(3, 2), planner(2, 2));
        let per_rank = three.plan(0).unwrap().batches_per_rank() as u64;
        let resumed = two.resume(&at(0, 3, per_rank)).unwrap();
        assert_eq!(resumed.plan.batches_per_rank(), 0);
        // A resumed plan's last batch may end in added empty blocks; serving it ends the epoch.
        let rest = two.resume(&at(0, 3, 1)).unwrap().plan;
        let last = rest.position(rest.batches_per_rank()).unwrap();
        assert_eq!(three.resume(&last).unwrap().plan.batches_per_rank(), 0);
    }

    #[test]
    fn bad_positions_are_named_with_their_bounds() {
        let (three, two) = (planner(3, 2), planner(2, 2));
        let per_rank = three.plan(0).unwrap().batches_per_rank();
        let err = two.resume(&at(0, 3, per_rank as u64 + 1)).unwrap_err();
        assert_eq!(err.argument, "batches");
        assert!(
            err.expected.starts_with(&format!("from 0 to {per_rank}, ")),
            "{err}"
        );
        let mut position = at(0, 3, 0);
        position.first_block = 10_000;
        let err = two.resume(&position).unwrap_err();
        assert_eq!(
            (err.argument.as_str(), err.value.as_str()),
            ("first_block", "10000")
        );
        let err = two.resume(&at(0, 0, 0)).unwrap_err();
        assert_eq!(err.argument, "planned_world_size");
        let err = two.resume(&at(0, 1000, 0)).unwrap_err();
        assert_eq!(err.argument, "planned_world_size * blocks_per_batch");
        assert!(err.expected.starts_with("at most 97:"), "{err}");
        let mut position = at(0, 3, 0);
        position.world_size = 0;
        assert_eq!(two.resume(&position).unwrap_err().argument, "world_size");
        let err = three.plan(0).unwrap().position(per_rank + 1).unwrap_err();
        assert_eq!(err.argument, "batches");
    }
}
