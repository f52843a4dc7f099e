//! What a plan costs, the least any plan could cost (its bounds in `bounds.rs`), and what the
//! paper's baselines cost on the same lengths.

use crate::error::{Error, Result};
use crate::options::Options;
use serde::Serialize;

mod bounds;
pub(crate) use bounds::{lower_bound, packing_bound};

/// Counted outcome of a plan. Every padded, deleted or split step is here.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct PlanStats {
    pub sequences: u64,
    /// Steps of all sequences.
    pub steps: u64,
    /// Pieces placed in blocks: one per sequence, more for split ones.
    pub pieces: u64,
    /// Blocks of the epoch over all ranks, a multiple of `world_size * blocks_per_batch`.
    pub blocks: u64,
    /// Padding steps over all blocks: `blocks * t_max - steps`.
    pub padding: u64,
    /// Steps dropped. bload's policies never drop a step; baselines may.
    pub deleted: u64,
    /// Sequences longer than `t_max` that were cut (split mode only).
    pub split_sequences: u64,
    /// Pieces those sequences were cut into.
    pub split_pieces: u64,
    /// Blocks added to reach a multiple of `world_size * blocks_per_batch` ...
    pub rounding_blocks: u64,
    /// ... and the padding they add: `rounding_blocks * t_max`, the least the rounding can cost.
    pub rounding_padding: u64,
    /// Blocks with no piece at all: only when rounding up to whole global batches needs more
    /// blocks than there are pieces.
    pub empty_blocks: u64,
    /// Share of computed steps that are real: `(steps - deleted) / (steps - deleted + padding)`.
    pub efficiency: f64,
    /// The least any plan of these lengths and options could cost.
    pub lower_bound: LowerBound,
    /// How unevenly the ranks' compute is spread, in the plan's `cost` (`plan/balance.rs`).
    pub rank_cost_imbalance: Imbalance,
}

/// Per global batch, the costliest rank's cost over the mean rank's cost (1 when every rank
/// costs the same, or nothing); DDP ranks wait for the costliest at every step, so this is the
/// time a step takes over the time it would with the work spread evenly.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Imbalance {
    /// Mean over the global batches.
    pub mean: f64,
    /// The largest over the global batches.
    pub worst: f64,
}

impl Default for Imbalance {
    fn default() -> Self {
        Imbalance {
            mean: 1.0,
            worst: 1.0,
        }
    }
}

impl PlanStats {
    /// Every count by name, for interfaces that hand stats out as a table of integers (the
    /// Python planner's dict) and for files that store them (a shared plan, `plan/shared`).
    pub fn counts(&self) -> [(&'static str, u64); 13] {
        self.clone()
            .count_fields()
            .map(|(name, count)| (name, *count))
    }

    /// The stats whose [`PlanStats::counts`] are `counts` (in its order) and whose lower bound
    /// before rounding is `blocks_unrounded`, the efficiency worked out from them: what a file
    /// that stored the counts reads back (the rank cost imbalance is measured when read).
    pub fn from_counts(counts: [u64; 13], blocks_unrounded: u64) -> PlanStats {
        let mut stats = PlanStats::default();
        for ((_, field), count) in stats.count_fields().into_iter().zip(counts) {
            *field = count;
        }
        stats.lower_bound.blocks_unrounded = blocks_unrounded;
        let deleted = stats.deleted.min(stats.steps);
        stats.efficiency = efficiency(stats.steps, deleted, stats.padding);
        stats
    }

    /// The one list of the counts, by name, in order. The destructuring names every field, so a
    /// field added to the struct does not compile until it is listed here too.
    fn count_fields(&mut self) -> [(&'static str, &mut u64); 13] {
        let PlanStats {
            sequences,
            steps,
            pieces,
            blocks,
            padding,
            deleted,
            split_sequences,
            split_pieces,
            rounding_blocks,
            rounding_padding,
            empty_blocks,
            efficiency: _,          // a ratio of the counts, not a count
            rank_cost_imbalance: _, // ratios, not counts
            lower_bound:
                LowerBound {
                    blocks_unrounded: _, // `lower_bound_blocks` before rounding
                    blocks: lower_bound_blocks,
                    padding: lower_bound_padding,
                },
        } = self;
        [
            ("sequences", sequences),
            ("steps", steps),
            ("pieces", pieces),
            ("blocks", blocks),
            ("padding", padding),
            ("deleted", deleted),
            ("split_sequences", split_sequences),
            ("split_pieces", split_pieces),
            ("rounding_blocks", rounding_blocks),
            ("rounding_padding", rounding_padding),
            ("empty_blocks", empty_blocks),
            ("lower_bound_blocks", lower_bound_blocks),
            ("lower_bound_padding", lower_bound_padding),
        ]
    }
}

/// The fewest blocks (and so the least padding) any plan of these lengths can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub struct LowerBound {
    /// Largest of `ceil(steps / t_max)`, the Martello-Toth L2 bound, the
    /// Carlier-Clautiaux-Moukrim bound and, under `max_pieces`, `ceil(packed pieces /
    /// max_pieces)` (plus a block per full chunk of a split sequence), before rounding: a true
    /// bound with or without the cap.
    pub blocks_unrounded: u64,
    /// Rounded up to a multiple of `world_size * blocks_per_batch`.
    pub blocks: u64,
    /// `blocks * t_max - steps`.
    pub padding: u64,
}

pub(crate) fn efficiency(steps: u64, deleted: u64, padding: u64) -> f64 {
    let kept = steps - deleted;
    if kept + padding == 0 {
        return 1.0;
    }
    kept as f64 / (kept + padding) as f64
}

pub(crate) fn round_up(blocks: u64, multiple: u64) -> u64 {
    blocks.div_ceil(multiple) * multiple
}

/// Cost of one of the paper's baselines, in the same units as a plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MethodStats {
    /// Rows of all ranks.
    pub blocks: u64,
    pub padding: u64,
    pub deleted: u64,
    pub efficiency: f64,
    /// Wall time to compute it, in milliseconds (filled by the caller that timed it).
    pub plan_ms: f64,
    /// A plan's [`PlanStats::rank_cost_imbalance`]; baselines, which are not planned, have none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank_cost_imbalance: Option<Imbalance>,
}

impl MethodStats {
    fn new(blocks: u64, padding: u64, deleted: u64, steps: u64) -> Self {
        MethodStats {
            blocks,
            padding,
            deleted,
            efficiency: efficiency(steps, deleted, padding),
            plan_ms: 0.0,
            rank_cost_imbalance: None,
        }
    }
}

/// Every sequence cut to at most `to` steps ("sampling" in the paper's Table I). Shorter sequences
/// are kept as they are, as the paper counts it; rows added to round to a multiple of the ranks'
/// batch are padding.
pub fn truncate(lengths: &[u32], to: u32, options: &Options) -> Result<MethodStats> {
    let (steps, deleted, _) = cut_and_pad(lengths, to, "truncate_to")?;
    let rows = round_up(lengths.len() as u64, options.blocks_per_global_batch());
    let padding = (rows - lengths.len() as u64) * u64::from(to);
    Ok(MethodStats::new(rows, padding, deleted, steps))
}

/// Every sequence cut or padded to exactly `to` steps ("mix pad" in the paper's Table I).
pub fn mix(lengths: &[u32], to: u32, options: &Options) -> Result<MethodStats> {
    let (steps, deleted, padded) = cut_and_pad(lengths, to, "mix_to")?;
    let rows = round_up(lengths.len() as u64, options.blocks_per_global_batch());
    let padding = padded + (rows - lengths.len() as u64) * u64::from(to);
    Ok(MethodStats::new(rows, padding, deleted, steps))
}

/// (steps, steps beyond `to`, steps short of `to`) over all sequences.
fn cut_and_pad(lengths: &[u32], to: u32, argument: &str) -> Result<(u64, u64, u64)> {
    if to == 0 {
        return Err(Error::invalid(
            argument,
            0,
            "a row length of at least 1 step",
        ));
    }
    let mut totals = (0, 0, 0);
    for &length in lengths {
        totals.0 += u64::from(length);
        totals.1 += u64::from(length.saturating_sub(to));
        totals.2 += u64::from(to.saturating_sub(length));
    }
    Ok(totals)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn baselines_count_cut_and_padded_steps() {
        let options = Options::new(10);
        let lengths = [3, 10, 7];
        let cut = truncate(&lengths, 5, &options).unwrap();
        assert_eq!((cut.blocks, cut.padding, cut.deleted), (3, 0, 7));
        let mixed = mix(&lengths, 5, &options).unwrap();
        assert_eq!((mixed.padding, mixed.deleted), (2, 7));
        assert!((mixed.efficiency - 13.0 / 15.0).abs() < 1e-12);
        assert_eq!(mix(&lengths, 0, &options).unwrap_err().argument, "mix_to");
    }
}
