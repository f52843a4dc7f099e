//! The deal against the rule as written: a stable comparison sort and a heap operation per
//! sequence, which is what `lanes` ran before the deal was made fast, and what plans keep.

use super::*;
use proptest::prelude::*;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The rule as written (what lanes did before this file): a stable sort and a heap.
fn deal_as_written(lengths: &[u32], seed: u64, epoch: u64, lanes: usize) -> Deal {
    let mut rng = PlanRng::new(seed, epoch, Stream::Lanes);
    let mut order: Vec<u32> = (0..lengths.len() as u32).collect();
    rng.shuffle(&mut order);
    order.sort_by_key(|&sequence| Reverse(lengths[sequence as usize]));
    let mut lane_numbers: Vec<u32> = (0..lanes as u32).collect();
    rng.shuffle(&mut lane_numbers);
    let mut steps = vec![0u64; lanes];
    let mut of_lane = vec![Vec::new(); lanes];
    let mut lightest: BinaryHeap<Reverse<(u64, usize)>> =
        (0..lanes).map(|dealt| Reverse((0, dealt))).collect();
    for &sequence in &order {
        let Reverse((load, dealt)) = lightest.pop().unwrap();
        let lane = lane_numbers[dealt] as usize;
        let load = load + u64::from(lengths[sequence as usize]);
        of_lane[lane].push(sequence);
        steps[lane] = load;
        lightest.push(Reverse((load, dealt)));
    }
    let mut starts = vec![0];
    for lane in &mut of_lane {
        rng.shuffle(lane);
        starts.push(starts.last().unwrap() + lane.len());
    }
    let order = of_lane.concat().into_iter();
    Deal {
        order: order.map(|s| pair(s, lengths[s as usize])).collect(),
        starts,
        steps,
        spare: Vec::new(),
    }
}

/// Each length's count, as a planner has them for lengths up to `t_max`: indexed by length.
fn counts_of(lengths: &[u32]) -> Vec<u32> {
    let longest = lengths.iter().copied().max().unwrap_or(0);
    let mut counts = vec![0; longest as usize + 1];
    for &length in lengths {
        counts[length as usize] += 1;
    }
    counts
}

/// The deal, with and without the planner's counts, is the rule as written.
fn assert_same(lengths: &[u32], seed: u64, lanes: usize) {
    let written = deal_as_written(lengths, seed, 1, lanes);
    for counts in [Vec::new(), counts_of(lengths)] {
        let fast = deal(lengths, &counts, seed, 1, lanes, 0).unwrap();
        assert_eq!(fast.order, written.order);
        assert_eq!(fast.starts, written.starts);
        assert_eq!(fast.steps, written.steps);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn the_deal_is_the_rule_as_written(
        lengths in prop::collection::vec(prop_oneof![
            4 => 1u32..=12,
            2 => 1u32..=300,
            1 => 1u32..=200_000,
            1 => prop::sample::select(vec![1, 7, u32::MAX]),
        ], 1..400),
        lanes in 1usize..=40,
        seed in any::<u64>(),
    ) {
        let written = deal_as_written(&lengths, seed, 1, lanes);
        // With the planner's counts where it keeps them (no length past 2^16 here).
        let counts = if lengths.iter().all(|&length| length <= 1 << 16) {
            counts_of(&lengths)
        } else {
            Vec::new()
        };
        let fast = deal(&lengths, &counts, seed, 1, lanes, 0).unwrap();
        prop_assert_eq!(fast.order, written.order);
        prop_assert_eq!(fast.starts, written.starts);
        prop_assert_eq!(fast.steps, written.steps);
    }
}

#[test]
fn long_runs_far_apart_lanes_and_wide_lengths_deal_as_written() {
    // Runs of thousands of one length, dealt in rounds.
    let runs: Vec<u32> = (0..20_000).map(|i| 1 + i % 7 * 13).collect();
    assert_same(&runs, 3, 32);
    // One lane far ahead of the rest for most of the deal; every lane alike.
    let mut giant = vec![1_000_000];
    giant.extend((0..5_000).map(|i| 1 + i % 50));
    assert_same(&giant, 4, 6);
    assert_same(&[9; 1_000], 5, 10);
    // Lengths over more than 2^16 values: the two-digit sort.
    let wide: Vec<u32> = (0..3_000u64)
        .map(|i| 1 + (i * 2_654_435_761 % 5_000_000) as u32)
        .collect();
    assert_same(&wide, 6, 17);
    // No sequence at all (which planners refuse), as many lanes as sequences, and one lane.
    assert_same(&[], 9, 3);
    assert_same(&runs[..50], 7, 50);
    assert_same(&runs[..50], 8, 1);
}
