//! Property tests of resuming an epoch part-way on another world size (`Planner::resume`): over
//! random lengths, options and chains of restarts, the batches served before and after every
//! restart cover every step of every sequence exactly once, every rank of every plan has the same
//! number of full batches, and the stats count every padded block that was served.

use bload::{EpochPlan, Options, Oversize, Planner};

use proptest::prelude::*;

use crate::common;
use common::options_strategy;

/// One stretch of training: `world_size` ranks, each serving `batches` (taken modulo what is
/// left, so that some stretches end the epoch and some serve nothing).
#[derive(Debug, Clone)]
struct Stretch {
    world_size: u32,
    batches: usize,
}

fn stretches_strategy() -> impl Strategy<Value = Vec<Stretch>> {
    prop::collection::vec(
        (1u32..=7, any::<usize>()).prop_map(|(world_size, batches)| Stretch {
            world_size,
            batches,
        }),
        1..5,
    )
}

/// The pieces of batches `from..to` of every rank of `plan`, as (sequence, offset, length).
fn served(plan: &EpochPlan, from: usize, to: usize, out: &mut Vec<(u32, u32, u32)>) -> u64 {
    let o = plan.options();
    let mut blocks = 0;
    for rank in 0..o.world_size {
        let batches: Vec<_> = plan.rank_batches(rank).unwrap().collect();
        assert_eq!(batches.len(), plan.batches_per_rank(), "rank {rank}");
        for batch in &batches[from..to] {
            assert_eq!(batch.blocks().len(), o.blocks_per_batch as usize);
            for block in batch.blocks() {
                blocks += 1;
                let pieces = block.pieces().map(|p| (p.index, p.offset, p.length));
                out.extend(pieces);
            }
        }
    }
    blocks
}

fn assert_every_step_once(mut pieces: Vec<(u32, u32, u32)>, lengths: &[u32]) {
    pieces.sort_unstable();
    let mut covered = vec![0u32; lengths.len()];
    for (index, offset, length) in pieces {
        assert_eq!(
            offset, covered[index as usize],
            "sequence {index}: gap or overlap"
        );
        covered[index as usize] += length;
    }
    assert_eq!(covered, lengths);
}

fn check_restarts(
    lengths: Vec<u32>,
    options: Options,
    epoch: u64,
    stretches: Vec<Stretch>,
) -> Result<(), TestCaseError> {
    let mut options = options;
    if lengths.iter().any(|&length| length > options.t_max) {
        options.oversize = Oversize::Split; // else refused, which is not this test's concern
    }
    let Ok(first) = Planner::new(lengths.clone(), options.clone()) else {
        // Fewer pieces than blocks_per_batch: refused on any world size (tests/contract.rs).
        return Ok(());
    };
    // More blocks per global batch than pieces are refused by the planner; keep to the world
    // sizes it accepts (at least 1: `first` was accepted with its own).
    let most_ranks = (first.pieces() / u64::from(options.blocks_per_batch)).min(7) as u32;
    // Lanes resume only with the lane count they were saved with (tests/lanes.rs): one world size.
    let lanes_ranks = 1 + (stretches[0].world_size - 1) % most_ranks;
    let ranks = |w: u32| match options.policy.carries_state() {
        true => lanes_ranks,
        false => 1 + (w - 1) % most_ranks,
    };
    let planner_for = |world_size: u32| {
        let mut options = options.clone();
        options.world_size = ranks(world_size);
        Planner::new(lengths.clone(), options).unwrap()
    };
    let mut plan = planner_for(stretches[0].world_size).plan(epoch).unwrap();
    let (mut at, mut pieces, mut blocks_served) = (0, Vec::new(), 0);
    for (i, stretch) in stretches.iter().enumerate() {
        if i > 0 {
            let planner = planner_for(stretch.world_size);
            let position = plan.position(at).unwrap();
            let resumed = planner.resume(&position).unwrap();
            let global = planner.options().blocks_per_global_batch() as usize;
            if position.world_size == planner.options().world_size {
                // The same ranks go on where they were, in the same plan.
                prop_assert_eq!(resumed.batches, at);
                prop_assert_eq!(resumed.plan.hash(), plan.hash());
            } else {
                prop_assert_eq!(resumed.batches, 0);
                // The blocks left, padded with fewer empty blocks than a global batch of the
                // new ranks: the stats are those of the plan the blocks come from, plus those.
                let mut origin = options.clone();
                origin.world_size = position.planned_world_size;
                let planned = Planner::new(lengths.clone(), origin)
                    .unwrap()
                    .plan(epoch)
                    .unwrap();
                let added = resumed.plan.stats().blocks - planned.stats().blocks;
                prop_assert!(added < global as u64);
                prop_assert_eq!(resumed.plan.num_blocks() % global, 0);
                let empty = resumed.plan.blocks().filter(|b| b.is_empty()).count() as u64;
                prop_assert!(empty >= added);
            }
            plan = resumed.plan;
            at = resumed.batches;
        }
        let left = plan.batches_per_rank() - at;
        let take = if i + 1 == stretches.len() {
            left
        } else {
            stretch.batches % (left + 1)
        };
        blocks_served += served(&plan, at, at + take, &mut pieces);
        at += take;
        if at == plan.batches_per_rank() {
            break; // the epoch is over
        }
    }
    prop_assert_eq!(at, plan.batches_per_rank());
    assert_every_step_once(pieces, &lengths);
    // Every block served is in the last plan's stats, empty ones as padding.
    let stats = plan.stats();
    prop_assert_eq!(stats.blocks, blocks_served);
    prop_assert_eq!(
        stats.padding,
        stats.blocks * u64::from(options.t_max) - stats.steps
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn restarts_on_any_world_sizes_serve_every_step_once(
        lengths in prop::collection::vec(prop_oneof![8 => 1u32..=48, 1 => 48u32..=150], 1..200),
        options in options_strategy(1..=48, 1..=1),
        epoch in 0u64..3,
        stretches in stretches_strategy(),
    ) {
        check_restarts(lengths, options, epoch, stretches)?;
    }
}

#[test]
fn three_ranks_resumed_on_two_serve_the_rest_once() {
    let lengths: Vec<u32> = (0..500).map(|i| 1 + (i * 37) % 94).collect();
    let stretches = vec![
        Stretch {
            world_size: 3,
            batches: 5,
        },
        Stretch {
            world_size: 2,
            batches: 0,
        },
    ];
    let mut options = Options::new(94);
    options.blocks_per_batch = 2;
    check_restarts(lengths, options, 1, stretches).unwrap();
}
