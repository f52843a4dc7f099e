//! Sharding an epoch's blocks to ranks and batches, so every rank runs the same number of
//! batches of exactly `blocks_per_batch` blocks.
//!
//! Blocks are [`Span`]s of the plan's pieces. Their count is first brought up to a multiple of
//! a global batch (`world_size * blocks_per_batch` blocks) without adding padding where the
//! pieces allow it ([`split_blocks_to_reach`]); then global batch `g` is blocks `g * W * B ..
//! (g + 1) * W * B`, and rank `r` takes the `B` blocks from `(g * W + r) * B`. Sharding is
//! arithmetic on block positions, so a rank reads its batches without touching anyone else's.

use super::block::Block;
use super::layout::Span;
use super::EpochPlan;
use crate::error::{Error, Result};

/// Brings the block count up to `target` at no cost in padding: padding is `blocks * t_max -
/// steps` whatever the blocks hold, so instead of adding empty blocks, blocks of several pieces
/// give their last piece a block of its own. Only when there are fewer pieces than blocks are
/// empty blocks added; returns how many.
pub(super) fn split_blocks_to_reach(spans: &mut Vec<Span>, target: usize) -> u64 {
    loop {
        let mut split_any = false;
        // From the end: the last blocks packed hold the most (and shortest) pieces.
        for block in (0..spans.len()).rev() {
            if spans.len() == target {
                return 0;
            }
            let Span { start, end } = spans[block];
            if end - start >= 2 {
                spans[block].end = end - 1;
                spans.push(Span {
                    start: end - 1,
                    end,
                });
                split_any = true;
            }
        }
        if !split_any {
            break;
        }
    }
    let empty = (target - spans.len()) as u64;
    spans.resize(target, Span { start: 0, end: 0 });
    empty
}

/// The real steps and the pieces of one global batch (every rank's batch of one index
/// together): see [`EpochPlan::global_batch`].
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct GlobalBatch {
    /// Real (non-padding) steps over every rank's blocks (`batch.global_valid` in Python).
    pub valid: u64,
    /// Pieces over every rank's blocks: the steps a causal LM's shifted labels skip.
    pub pieces: u64,
    /// What a rank multiplies its summed loss by so that DDP's average of the ranks' gradients
    /// is the gradient of the token mean over the global batch: `world_size / valid` (0 where
    /// the global batch has no real step: every rank's sum is 0 then too).
    pub loss_scale: f64,
    /// The same for a causal LM's shifted labels, which skip each piece's first step:
    /// `world_size / (valid - pieces)`, 0 where no label is left.
    pub shifted_loss_scale: f64,
}

impl GlobalBatch {
    fn new(valid: u64, pieces: u64, world_size: u32) -> Self {
        let scale = |targets: u64| {
            if targets == 0 {
                0.0
            } else {
                f64::from(world_size) / targets as f64
            }
        };
        GlobalBatch {
            valid,
            pieces,
            loss_scale: scale(valid),
            shifted_loss_scale: scale(valid - pieces),
        }
    }
}

impl EpochPlan {
    /// Batches every rank runs this epoch (the same on every rank).
    pub fn batches_per_rank(&self) -> usize {
        self.spans.len() / self.options.blocks_per_global_batch() as usize
    }

    /// Batch `batch` of rank `rank`: exactly `blocks_per_batch` blocks.
    pub fn batch(&self, rank: u32, batch: usize) -> Result<Batch<'_>> {
        self.check_rank(rank)?;
        // A plan mapped from a shared file: the file still holds it (one fstat a batch).
        self.spans.check_mapped()?;
        if batch >= self.batches_per_rank() {
            return Err(Error::invalid(
                "batch",
                batch,
                format!("a batch index below {}", self.batches_per_rank()),
            ));
        }
        let per_batch = self.options.blocks_per_batch as usize;
        let first = (batch * self.options.world_size as usize + rank as usize) * per_batch;
        Ok(Batch {
            plan: self,
            first_block: first,
        })
    }

    /// What every rank's batch `batch` holds together, the global batch: its real steps and
    /// its pieces. A rank's summed loss scaled by `world_size / steps` (or, for a causal LM's
    /// shifted labels, which skip each piece's first step, `world_size / (steps - pieces)`)
    /// becomes the token mean over the global batch once DDP averages the ranks' gradients,
    /// with no collective of its own. Reads the global batch's blocks, `world_size` times a
    /// rank's own.
    pub fn global_batch(&self, batch: usize) -> Result<GlobalBatch> {
        let own = self.batch(0, batch)?; // checks the index
        Ok(self.global_batch_from(own.first_block))
    }

    /// The global batch whose first block is at `first` (a multiple of a global batch's blocks).
    pub(super) fn global_batch_from(&self, first: usize) -> GlobalBatch {
        let count = self.options.blocks_per_global_batch() as usize;
        let (mut steps, mut pieces) = (0, 0);
        for position in first..first + count {
            let block = self.block_at(position);
            steps += u64::from(block.used());
            pieces += block.len() as u64;
        }
        GlobalBatch::new(steps, pieces, self.options.world_size)
    }

    /// All batches of `rank`, in order.
    pub fn rank_batches(&self, rank: u32) -> Result<impl ExactSizeIterator<Item = Batch<'_>> + '_> {
        self.check_rank(rank)?;
        self.spans.check_mapped()?;
        let per_batch = self.options.blocks_per_batch as usize;
        let stride = self.options.world_size as usize * per_batch;
        Ok((0..self.batches_per_rank()).map(move |batch| Batch {
            plan: self,
            first_block: batch * stride + rank as usize * per_batch,
        }))
    }

    fn check_rank(&self, rank: u32) -> Result<()> {
        if rank >= self.options.world_size {
            return Err(Error::invalid(
                "rank",
                rank,
                format!(
                    "a rank below world_size ({}), counting from 0",
                    self.options.world_size
                ),
            ));
        }
        Ok(())
    }
}

/// One batch of one rank: `blocks_per_batch` consecutive blocks of the epoch order (which ones is
/// the sharding's choice, above).
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    pub(super) plan: &'a EpochPlan,
    /// The position of its first block in epoch order.
    pub(super) first_block: usize,
}

impl<'a> Batch<'a> {
    /// The global batch this batch is part of: every rank's batch of its index together
    /// ([`EpochPlan::global_batch`]).
    pub fn global(&self) -> GlobalBatch {
        let global = self.plan.options.blocks_per_global_batch() as usize;
        self.plan
            .global_batch_from(self.first_block - self.first_block % global)
    }

    pub fn blocks(&self) -> impl ExactSizeIterator<Item = Block<'a>> + 'a {
        let plan = self.plan;
        let count = plan.options.blocks_per_batch as usize;
        (self.first_block..self.first_block + count).map(move |position| plan.block_at(position))
    }

    pub fn t_max(&self) -> u32 {
        self.plan.options.t_max
    }

    /// The lengths the plan was made from.
    pub fn lengths(&self) -> &'a [u32] {
        self.plan.lengths()
    }

    /// Whether each row carries its recurrent state from the previous batch (`lanes`).
    pub fn carries_state(&self) -> bool {
        self.plan.options.policy.carries_state()
    }

    /// The lane of each row, `rank * blocks_per_batch + row` (lanes stay put all epoch; in a
    /// packed plan the number only says where the row lies in the global batch).
    pub fn lanes(&self) -> impl ExactSizeIterator<Item = u32> {
        let lanes = self.plan.options.blocks_per_global_batch() as usize;
        let first = (self.first_block % lanes) as u32;
        first..first + self.plan.options.blocks_per_batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{Options, Oversize, Policy};
    use crate::plan::{Piece, Planner};

    fn spans(ranges: &[(u32, u32)]) -> Vec<Span> {
        ranges
            .iter()
            .map(|&(start, end)| Span { start, end })
            .collect()
    }

    #[test]
    fn splits_the_last_multi_piece_blocks_first() {
        let mut blocks = spans(&[(0, 3), (3, 4), (4, 6)]);
        assert_eq!(split_blocks_to_reach(&mut blocks, 5), 0);
        assert_eq!(blocks, spans(&[(0, 2), (3, 4), (4, 5), (5, 6), (2, 3)]));
    }

    #[test]
    fn splits_a_block_again_in_later_passes() {
        let mut blocks = spans(&[(0, 4)]);
        assert_eq!(split_blocks_to_reach(&mut blocks, 4), 0);
        assert_eq!(blocks, spans(&[(0, 1), (3, 4), (2, 3), (1, 2)]));
    }

    #[test]
    fn adds_empty_blocks_only_when_every_block_has_one_piece() {
        let mut blocks = spans(&[(0, 2), (2, 3)]);
        assert_eq!(split_blocks_to_reach(&mut blocks, 5), 2);
        assert_eq!(blocks, spans(&[(0, 1), (2, 3), (1, 2), (0, 0), (0, 0)]));
    }

    #[test]
    fn leaves_blocks_already_at_the_target_alone() {
        let mut blocks = spans(&[(0, 3), (3, 5)]);
        assert_eq!(split_blocks_to_reach(&mut blocks, 2), 0);
        assert_eq!(blocks, spans(&[(0, 3), (3, 5)]));
    }

    fn sharded_plan() -> EpochPlan {
        let mut options = Options::new(10);
        options.world_size = 2;
        options.blocks_per_batch = 3;
        let lengths = (0..40).map(|i| 1 + i % 10).collect();
        Planner::new(lengths, options).unwrap().plan(5).unwrap()
    }

    #[test]
    fn rank_r_takes_b_blocks_from_g_w_plus_r_times_b() {
        let plan = sharded_plan();
        let (w, b) = (2, 3);
        assert_eq!(plan.num_blocks() % (w * b), 0);
        assert_eq!(plan.batches_per_rank(), plan.num_blocks() / (w * b));
        assert!(plan.batches_per_rank() >= 2);
        let mut taken = vec![0; plan.num_blocks()];
        for rank in 0..w {
            let batches: Vec<Batch> = plan.rank_batches(rank as u32).unwrap().collect();
            assert_eq!(batches.len(), plan.batches_per_rank());
            for (g, batch) in batches.iter().enumerate() {
                assert_eq!(batch.first_block, (g * w + rank) * b);
                let same = plan.batch(rank as u32, g).unwrap();
                assert_eq!(same.first_block, batch.first_block);
                assert_eq!(batch.blocks().len(), b);
                for count in &mut taken[batch.first_block..batch.first_block + b] {
                    *count += 1;
                }
            }
        }
        // Every block goes to exactly one batch of one rank.
        assert!(taken.iter().all(|&count| count == 1));
    }

    #[test]
    fn a_bad_rank_or_batch_is_named() {
        let plan = sharded_plan();
        let err = plan.batch(2, 0).err().unwrap();
        assert_eq!((err.argument.as_str(), err.value.as_str()), ("rank", "2"));
        assert!(err.expected.contains("world_size (2)"), "{err}");
        let err = plan.rank_batches(7).err().unwrap();
        assert_eq!((err.argument.as_str(), err.value.as_str()), ("rank", "7"));
        let last = plan.batches_per_rank();
        let err = plan.batch(1, last).err().unwrap();
        assert_eq!(err.argument, "batch");
        assert_eq!(err.value, last.to_string());
        assert!(plan.batch(1, last - 1).is_ok());
    }

    #[test]
    fn a_global_batch_is_its_ranks_batches_together_at_any_world_size() {
        use crate::table::Column;
        // Up to 23 steps (under t_max 24), or up to 40 where they are split or carried.
        let short: Vec<u32> = (0..300).map(|i| 1 + (i * 37) % 23).collect();
        let long: Vec<u32> = (0..300).map(|i| 1 + (i * 37) % 40).collect();
        for (policy, split) in [
            (Policy::BestFit, false),
            (Policy::BestFit, true),
            (Policy::RandomFill, false),
            (Policy::PadToMax, false),
            (Policy::Lanes, false),
        ] {
            let lengths = if split || policy == Policy::Lanes {
                &long
            } else {
                &short
            };
            let mut seen = None;
            for (world_size, blocks_per_batch) in [(1, 8), (2, 4), (4, 2), (8, 1)] {
                let mut options = Options::new(24);
                options.policy = policy;
                options.world_size = world_size;
                options.blocks_per_batch = blocks_per_batch;
                if split {
                    options.oversize = Oversize::Split;
                }
                let plan = Planner::new(lengths.clone(), options)
                    .unwrap()
                    .plan(3)
                    .unwrap();
                let globals: Vec<GlobalBatch> = (0..plan.batches_per_rank())
                    .map(|batch| plan.global_batch(batch).unwrap())
                    .collect();
                for (index, global) in globals.iter().enumerate() {
                    let (mut steps, mut pieces) = (0, 0);
                    for rank in 0..world_size {
                        let table = plan.batch(rank, index).unwrap().table();
                        steps += table
                            .iter()
                            .map(|row| row[Column::Length as usize])
                            .sum::<i64>();
                        pieces += table.len();
                    }
                    assert_eq!((global.valid, global.pieces), (steps as u64, pieces as u64));
                    for rank in 0..world_size {
                        assert_eq!(&plan.batch(rank, index).unwrap().global(), global);
                    }
                    let world = f64::from(world_size);
                    assert_eq!(global.loss_scale, world / steps as f64);
                    assert_eq!(
                        global.shifted_loss_scale,
                        world / (steps - pieces as i64) as f64
                    );
                }
                // The same global batches at every factoring of 8 blocks a global batch.
                let steps: Vec<u64> = globals.iter().map(|global| global.valid).collect();
                assert_eq!(steps.iter().sum::<u64>(), plan.stats().steps, "{policy:?}");
                if let Some(first) = &seen {
                    assert_eq!(first, &steps, "{policy:?} at world size {world_size}");
                }
                seen.get_or_insert(steps);
            }
        }
        let plan = sharded_plan();
        let err = plan.global_batch(plan.batches_per_rank()).err().unwrap();
        assert_eq!(err.argument, "batch");
    }

    #[test]
    fn a_batch_reads_its_consecutive_blocks() {
        let mut options = Options::new(10);
        options.blocks_per_batch = 3;
        let plan = Planner::new((1..=10).collect(), options)
            .unwrap()
            .plan(0)
            .unwrap();
        let batch = Batch {
            plan: &plan,
            first_block: 3,
        };
        let read: Vec<Vec<Piece>> = batch.blocks().map(|b| b.pieces().collect()).collect();
        let expected: Vec<Vec<Piece>> = (3..6)
            .map(|p| plan.block_at(p).pieces().collect())
            .collect();
        assert_eq!(read, expected);
        assert_eq!(batch.t_max(), 10);
        assert_eq!(batch.lengths(), plan.lengths());
    }
}
