//! The improvement search reaches the bound greedy filling missed, keeps a packing at the bound
//! (or beyond its reach) as it is, and keeps to the cap.

use super::*;
use crate::pack::{best_fit_decreasing, counts_of};
use crate::rng::{PlanRng, Stream};

fn sorted(mut lengths: Vec<u32>) -> Vec<u32> {
    lengths.sort_unstable();
    lengths
}

#[test]
fn trades_reach_the_bound_greedy_missed() {
    // 30 steps in blocks of 10 packed in 4; {6, 4}, {5, 5}, {4, 3, 3} fill 3 exactly.
    let greedy = Packing::of_blocks(&[&[5, 4], &[5, 4], &[3, 3], &[6]]);
    let improved = improve(
        Packing::of_blocks(&[&[5, 4], &[5, 4], &[3, 3], &[6]]),
        10,
        u32::MAX,
        3,
    );
    let improved = improved.unwrap();
    assert_eq!(improved.ends.len(), 3);
    assert!(improved
        .blocks()
        .all(|block| block.iter().sum::<u32>() <= 10));
    assert_eq!(sorted(improved.lengths), sorted(greedy.lengths));
}

#[test]
fn a_packing_at_the_bound_or_beyond_reach_is_kept() {
    let at_bound = improve(Packing::of_blocks(&[&[6, 4], &[5, 5]]), 10, u32::MAX, 2).unwrap();
    assert_eq!(
        (at_bound.lengths, at_bound.ends),
        (vec![6, 4, 5, 5], vec![2, 4])
    );
    // Three 6s need three blocks whatever the bound says: the search gives up, unchanged.
    let stuck = improve(Packing::of_blocks(&[&[6], &[6], &[6]]), 10, u32::MAX, 2).unwrap();
    assert_eq!((stuck.lengths, stuck.ends), (vec![6, 6, 6], vec![1, 2, 3]));
}

#[test]
fn trades_keep_to_the_cap() {
    // Blocks of 10, at most 2 lengths: {5, 5}, {4, 3, 3} would reach 3 blocks by volume
    // but holds 3; the only packings in 4 blocks keep pairs.
    let start = Packing::of_blocks(&[&[5, 4], &[5, 4], &[3, 3], &[6]]);
    let improved = improve(start, 10, 2, 3).unwrap();
    assert!(improved.blocks().all(|block| block.len() <= 2));
    assert_eq!(improved.ends.len(), 4);
    // {6, 4}, {5, 5}, {3, 3} in 3 with two a block, from 4.
    let start = Packing::of_blocks(&[&[6], &[5, 4], &[5, 3], &[3]]);
    let improved = improve(start, 10, 2, 3).unwrap();
    assert!(improved.blocks().all(|block| block.len() <= 2));
    assert_eq!(improved.ends.len(), 3);
}

/// Passing bins already known to have no helpful trade, and taking the fast path in bins no tabu
/// item names, change only the time: on random sets (small and large `t_max`, with and without
/// caps, searches that kick and make items tabu), the same packings as weighing every bin.
#[test]
fn shortcuts_make_the_same_trades() {
    let mut rng = PlanRng::new(11, 0, Stream::RandomFill);
    let mut improved = 0;
    for case in 0..240u32 {
        let t_max = match case % 4 {
            0 => 10 + rng.below(30),
            1 => 50 + rng.below(400),
            2 => 384,
            _ => 17_000 + rng.below(5_000),
        };
        let spread = 1 + rng.below(t_max);
        let n = 5 + rng.below([30, 120, 400][case as usize % 3]);
        let lengths: Vec<u32> = (0..n).map(|_| 1 + rng.below(spread)).collect();
        let cap = match case % 5 {
            0 => 2 + rng.below(6),
            1 => 3,
            _ => u32::MAX,
        };
        let counts = counts_of(&lengths, t_max);
        let steps: u64 = lengths.iter().map(|&length| u64::from(length)).sum();
        // Below what can be reached, so that the search spends its budget.
        let bound = steps.div_ceil(u64::from(t_max));
        let start = || best_fit_decreasing(&counts, t_max, cap).unwrap();
        let before = start().ends.len();
        let fast = improve_with(start(), t_max, cap, bound, true).unwrap();
        let slow = improve_with(start(), t_max, cap, bound, false).unwrap();
        assert_eq!(
            (&fast.lengths, &fast.ends),
            (&slow.lengths, &slow.ends),
            "case {case}: t_max {t_max}, cap {cap}, lengths {lengths:?}"
        );
        improved += usize::from(fast.ends.len() < before);
    }
    // The search found fewer blocks in enough cases for the comparison to mean something.
    assert!(improved >= 20, "{improved}");
}
