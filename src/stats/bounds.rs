//! The least any plan of a set of lengths could cost: the fewest blocks its lengths fit in (the
//! volume, Martello and Toth's L2, Carlier, Clautiaux and Moukrim's bound, and a cap's own), and
//! that count rounded to the ranks' batches (`LowerBound`).

use super::{round_up, LowerBound};
use crate::alloc::try_vec;
use crate::error::Result;
use crate::options::Options;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pack::counts_of;

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
}
