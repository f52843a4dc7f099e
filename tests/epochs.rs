//! Epochs of any size (issue 13): totals past 2^32 steps are planned like any other, and stay at
//! the lower bound. Not timed; the bench (`benches/plan.rs`) times 100M sequences.

use bload::{Options, Oversize, Planner, MAX_T_MAX};

/// Every sequence whole, in exactly one block; blocks end to end within t_max; every rank the
/// same number of batches. (tests/contract.rs checks more, on small inputs.)
fn check_whole_sequences_once(planner: &Planner, options: &Options) {
    let plan = planner.plan(0).unwrap();
    let lengths = planner.lengths();
    let mut seen = vec![0u8; lengths.len()];
    for block in plan.blocks() {
        let mut at = 0;
        for piece in block.pieces() {
            assert_eq!((piece.offset, piece.block_offset), (0, at));
            assert_eq!(piece.length, lengths[piece.index as usize]);
            seen[piece.index as usize] += 1;
            at += piece.length;
        }
        assert!(at <= options.t_max);
    }
    assert!(seen.iter().all(|&times| times == 1));
    for rank in 0..options.world_size {
        let batches = plan.rank_batches(rank).unwrap();
        assert_eq!(batches.len(), plan.batches_per_rank());
    }
    let stats = plan.stats();
    assert_eq!(stats.steps, planner.steps());
    assert_eq!(stats.blocks, plan.num_blocks() as u64);
    assert_eq!(
        stats.padding,
        stats.blocks * u64::from(options.t_max) - stats.steps
    );
    // At the lower bound within 0.01%.
    let bound = stats.lower_bound.blocks;
    assert!(stats.blocks * 10_000 <= bound * 10_001, "{stats:?}");
}

#[test]
fn an_epoch_of_more_than_2_to_the_32_steps_is_planned() {
    // 2M sequences of 200 to 6,000 steps (triangular, mean 3,100): about 6.2e9 steps, in blocks
    // of 8,192.
    let lengths: Vec<u32> = (0..2_000_000u32)
        .map(|i| {
            let hash = i.wrapping_mul(2_654_435_761);
            200 + (hash >> 4) % 2_901 + (hash >> 16) % 2_901
        })
        .collect();
    let mut options = Options::new(8_192);
    options.world_size = 8;
    options.blocks_per_batch = 4;
    let planner = Planner::new(lengths, options.clone()).unwrap();
    assert!(planner.steps() > 1 << 32, "{}", planner.steps());
    check_whole_sequences_once(&planner, &options);
}

#[test]
fn sequences_of_nearly_2_to_the_32_steps_are_split_and_served_once() {
    let lengths = vec![u32::MAX, u32::MAX - 1, 4_000_000_000, 1 << 31, 12_345, 7];
    let mut options = Options::new(MAX_T_MAX);
    options.oversize = Oversize::Split;
    options.world_size = 4;
    let planner = Planner::new(lengths.clone(), options).unwrap();
    let steps: u64 = lengths.iter().map(|&length| u64::from(length)).sum();
    assert_eq!(planner.steps(), steps);
    let plan = planner.plan(1).unwrap();
    // Every step of every sequence exactly once: pieces tile each sequence from 0.
    let mut pieces: Vec<Vec<(u32, u32)>> = vec![Vec::new(); lengths.len()];
    for block in plan.blocks() {
        for piece in block.pieces() {
            pieces[piece.index as usize].push((piece.offset, piece.length));
        }
    }
    for (index, mut pieces) in pieces.into_iter().enumerate() {
        pieces.sort_unstable();
        let mut next = 0u64;
        for (offset, length) in pieces {
            assert_eq!(u64::from(offset), next, "sequence {index}");
            next += u64::from(length);
        }
        assert_eq!(next, u64::from(lengths[index]), "sequence {index}");
    }
    let stats = plan.stats();
    assert_eq!(stats.padding, stats.blocks * u64::from(MAX_T_MAX) - steps);
    assert_eq!(stats.blocks % 4, 0);
}
