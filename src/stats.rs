//! What a plan costs, the least any plan could cost, and what the paper's baselines cost on the
//! same lengths.

use crate::alloc::try_vec;
use crate::error::{Error, Result};
use crate::options::Options;
use serde::Serialize;

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

/// The fewest blocks that items with `counts[len]` of each length `1..=t_max` fit in, at most
/// `cap` items a block (`u32::MAX`: no cap). Every bound of the uncapped problem holds under a
/// cap too (a capped packing is a packing), and a cap adds its own: `ceil(items / cap)`, and at
/// a cap of 2 the exact fewest (`fewest_blocks_of_pairs`).
pub(crate) fn packing_bound(counts: &[u32], cap: u32) -> Result<u64> {
    if cap == 2 {
        return crate::pack::fewest_blocks_of_pairs(counts);
    }
    let t_max = counts.len() as u64 - 1;
    let steps: u64 = (0..).zip(counts).map(|(len, &c)| len * u64::from(c)).sum();
    let bound = steps.div_ceil(t_max).max(martello_toth_l2(counts)?);
    let items: u64 = counts.iter().map(|&c| u64::from(c)).sum();
    let by_cap = items.div_ceil(u64::from(cap));
    Ok(bound.max(carlier_clautiaux_moukrim(counts)?).max(by_cap))
}

/// The bound of Carlier, Clautiaux and Moukrim's dual feasible function f_CCM,1 (2007): for a
/// threshold `a` and capacity `c`, an item of `x` steps counts `2 * floor(x / a)` if `x < c/2`,
/// `floor(c / a)` if `x = c/2`, and `2 * (floor(c / a) - floor((c - x) / a))` if `x > c/2`, in
/// blocks of `2 * floor(c / a)`: whatever fits in a block still does, so the counted total over
/// that capacity bounds the blocks. Unlike L2, it sees that lengths a little under half a block
/// waste the rest of it, which is where sets of a few hundred long lengths end above L2 (on
/// such a set, 222 blocks against an L2 of 220 are optimal, and this bound shows it).
///
/// Thresholds are the lengths present from `c/256` to `c/2` (below, `floor(x / a) * a` is within
/// 1/256 of `x` and the bound no better than the volume's); each costs `c / a` steps over
/// prefix counts, so `c * ln 128` in all at most.
fn carlier_clautiaux_moukrim(counts: &[u32]) -> Result<u64> {
    let capacity = counts.len() - 1;
    // small_below[w]: items (< c/2) shorter than w; large_below[w]: items (> c/2) that leave
    // less than w of room. 32 bits: there are at most 2^32 - 1 items in all.
    // Only lengths below c/2 (and rooms below c/2) are looked up: `top` entries and one more.
    let top = capacity.div_ceil(2);
    let mut small_below = try_vec("the short items up to each length", top + 1, 0u32)?;
    let mut large_below = try_vec("the long items up to each room", top + 1, 0u32)?;
    for w in 0..top {
        small_below[w + 1] = small_below[w] + counts[w];
        large_below[w + 1] = large_below[w] + counts[capacity - w];
    }
    let half = if capacity % 2 == 0 {
        u64::from(counts[capacity / 2])
    } else {
        0
    };
    let low = (capacity / 256).max(1);
    let mut best = 0;
    for a in (low..=capacity / 2).filter(|&a| counts[a] > 0) {
        let per_block = (capacity / a) as u64;
        // Sum of floor(x / a) over small items, and of floor((c - x) / a) over large ones: items
        // in [k a, (k + 1) a) count k.
        let (mut small, mut large) = (0u64, 0u64);
        for k in 1..=top / a {
            let (from, to) = (k * a, ((k + 1) * a).min(top));
            small += k as u64 * u64::from(small_below[to] - small_below[from]);
            large += k as u64 * u64::from(large_below[to] - large_below[from]);
        }
        let large_items = u64::from(large_below[top]);
        let total = 2 * small + half * per_block + 2 * (large_items * per_block - large);
        best = best.max(total.div_ceil(2 * per_block));
    }
    Ok(best)
}

/// Lower bound for `full_chunks` blocks that are already full plus `packed_blocks` more.
pub(crate) fn lower_bound(
    packed_blocks: u64,
    full_chunks: u64,
    steps: u64,
    options: &Options,
) -> LowerBound {
    let t_max = u64::from(options.t_max);
    let blocks_unrounded = full_chunks + packed_blocks;
    let blocks = round_up(blocks_unrounded, options.blocks_per_global_batch());
    LowerBound {
        blocks_unrounded,
        blocks,
        padding: blocks * t_max - steps,
    }
}

/// Martello and Toth's L2 bound for bin packing with capacity `c = counts.len() - 1`: for every
/// threshold `a` in `1..=c/2`, items longer than `c - a` need a block each (J1); items in
/// `(c/2, c - a]` need a block each too (J2), and items in `[a, c/2]` (J3) can only use the room
/// J2's blocks leave, or new blocks.
fn martello_toth_l2(counts: &[u32]) -> Result<u64> {
    let capacity = counts.len() - 1;
    // count_upto[w] and steps_upto[w]: items of length at most w, and their steps.
    let mut count_upto = try_vec("the items up to each length", capacity + 1, 0u64)?;
    let mut steps_upto = try_vec("the steps up to each length", capacity + 1, 0u64)?;
    for w in 1..=capacity {
        count_upto[w] = count_upto[w - 1] + u64::from(counts[w]);
        steps_upto[w] = steps_upto[w - 1] + w as u64 * u64::from(counts[w]);
    }
    let between = |table: &[u64], low: usize, high: usize| -> u64 {
        // Items with length in low..=high.
        if high < low {
            0
        } else {
            table[high] - table[low - 1]
        }
    };
    let half = capacity / 2;
    let mut best = 0;
    for a in 1..=half {
        let j1 = between(&count_upto, capacity - a + 1, capacity);
        let j2 = between(&count_upto, half + 1, capacity - a);
        let j2_steps = between(&steps_upto, half + 1, capacity - a);
        let j3_steps = between(&steps_upto, a, half);
        let room_in_j2 = j2 * capacity as u64 - j2_steps;
        let extra = j3_steps
            .saturating_sub(room_in_j2)
            .div_ceil(capacity as u64);
        best = best.max(j1 + j2 + extra);
    }
    Ok(best)
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

    fn counts_of(lengths: &[u32], t_max: usize) -> Vec<u32> {
        let mut counts = vec![0; t_max + 1];
        for &length in lengths {
            counts[length as usize] += 1;
        }
        counts
    }

    #[test]
    fn l2_counts_items_that_cannot_share_a_block() {
        // Three items of 6 in blocks of 10: 18 steps fit 2 blocks by volume, but no two share.
        assert_eq!(martello_toth_l2(&counts_of(&[6, 6, 6], 10)).unwrap(), 3);
        let packed = packing_bound(&counts_of(&[6, 6, 6], 10), u32::MAX).unwrap();
        let bound = lower_bound(packed, 0, 18, &Options::new(10));
        assert_eq!((bound.blocks, bound.padding), (3, 12));
        // Items of 6 leave room 4 each; three 5s cannot use it, so they need 2 more blocks.
        assert_eq!(
            martello_toth_l2(&counts_of(&[6, 6, 5, 5, 5], 10)).unwrap(),
            4
        );
    }

    #[test]
    fn ccm_counts_lengths_just_under_half_a_block() {
        // Five items of 61 and five of 40 in blocks of 100: no 40 fits beside a 61 (101), and
        // no three 40s share a block, so 5 + 3 = 8 blocks. L2 counts the 40s by volume (7);
        // f_CCM,1 with threshold 40 counts a 61 as 4 and a 40 as 2 in blocks of 4: 30 / 4.
        let mut lengths = vec![40; 5];
        lengths.extend([61; 5]);
        let counts = counts_of(&lengths, 100);
        assert_eq!(martello_toth_l2(&counts).unwrap(), 7);
        assert_eq!(carlier_clautiaux_moukrim(&counts).unwrap(), 8);
        assert_eq!(packing_bound(&counts, u32::MAX).unwrap(), 8);
        // Never above what a packing reaches: six 34s pack in 3 blocks of 68.
        let counts = counts_of(&[34; 6], 100);
        assert_eq!(carlier_clautiaux_moukrim(&counts).unwrap(), 3);
        // Half a block exactly counts half: four 50s fill 2 blocks.
        assert_eq!(
            carlier_clautiaux_moukrim(&counts_of(&[50; 4], 100)).unwrap(),
            2
        );
    }

    #[test]
    fn a_cap_on_pieces_bounds_the_blocks_from_below() {
        // Twenty 1s fill 2 blocks of 10 by volume; at most 3 a block they need 7.
        let counts = counts_of(&[1; 20], 10);
        assert_eq!(packing_bound(&counts, u32::MAX).unwrap(), 2);
        assert_eq!(packing_bound(&counts, 3).unwrap(), 7);
        // A cap that the volume already implies changes nothing.
        assert_eq!(packing_bound(&counts_of(&[6, 6, 6], 10), 1).unwrap(), 3);
    }

    #[test]
    fn lower_bound_rounds_up_to_the_global_batch() {
        let mut options = Options::new(10);
        options.world_size = 4;
        let packed = packing_bound(&counts_of(&[10, 10, 10, 10, 10], 10), u32::MAX).unwrap();
        let bound = lower_bound(packed, 2, 70, &options);
        assert_eq!(bound.blocks_unrounded, 7);
        assert_eq!(bound.blocks, 8);
        assert_eq!(bound.padding, 10);
    }

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
