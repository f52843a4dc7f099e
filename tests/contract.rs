//! Property tests of the DDP contract, over random lengths and options, for every policy:
//! equal batch counts on every rank, batches of exactly `blocks_per_batch` blocks of `t_max`
//! steps, every step of every sequence exactly once per epoch, the least rounding, never more
//! than `max_pieces` pieces in a block, and plans that are pure functions of their inputs.

use bload::{EpochPlan, Options, Oversize, Planner, Policy};

use proptest::prelude::*;

use crate::common;
use crate::common::hard_sets;
use common::options_strategy;

/// Lengths mostly up to `short`, some up to `long`, so split mode is exercised.
fn lengths_strategy(short: u32, long: u32) -> impl Strategy<Value = Vec<u32>> {
    prop::collection::vec(prop_oneof![8 => 1..=short, 1 => short..=long], 1..300)
}

/// Every step of every sequence, over all ranks and batches, exactly once.
fn assert_exactly_once(plan: &EpochPlan, lengths: &[u32]) {
    let o = plan.options();
    let mut covered: Vec<Vec<(u32, u32)>> = vec![Vec::new(); lengths.len()];
    for rank in 0..o.world_size {
        for batch in plan.rank_batches(rank).unwrap() {
            for block in batch.blocks() {
                for piece in block.pieces() {
                    covered[piece.index as usize].push((piece.offset, piece.length));
                }
            }
        }
    }
    for (index, pieces) in covered.iter_mut().enumerate() {
        pieces.sort_unstable();
        let mut next = 0;
        for &(offset, length) in pieces.iter() {
            assert_eq!(
                offset, next,
                "sequence {index}: gap or overlap in {pieces:?}"
            );
            assert!(length > 0);
            next += length;
        }
        assert_eq!(next, lengths[index], "sequence {index}: pieces {pieces:?}");
    }
}

fn check_plan(plan: &EpochPlan, planner: &Planner) {
    let o = plan.options();
    let lengths = planner.lengths();
    let per_global_batch = (o.world_size * o.blocks_per_batch) as usize;

    // Equal, full batches on every rank.
    let batches = plan.batches_per_rank();
    assert!(batches >= 1);
    assert_eq!(plan.num_blocks(), batches * per_global_batch);
    for rank in 0..o.world_size {
        let rank_batches: Vec<_> = plan.rank_batches(rank).unwrap().collect();
        assert_eq!(rank_batches.len(), batches);
        for batch in rank_batches {
            assert_eq!(batch.blocks().len(), o.blocks_per_batch as usize);
        }
    }
    assert!(plan.rank_batches(o.world_size).is_err());

    // Every block's pieces lie end to end from step 0 and fit in t_max.
    for block in plan.blocks() {
        let mut at = 0;
        for piece in block.pieces() {
            assert_eq!(piece.block_offset, at);
            assert_eq!(piece.continues, piece.offset > 0);
            assert!(piece.offset + piece.length <= lengths[piece.index as usize]);
            at += piece.length;
        }
        assert!(at <= o.t_max);
        assert_eq!(block.used(), at);
        if let Some(cap) = o.max_pieces {
            assert!(
                block.len() <= cap as usize,
                "{} pieces, cap {cap}",
                block.len()
            );
        }
    }
    assert_exactly_once(plan, lengths);

    // Stats add up, and the rounding to whole global batches adds less than one global batch.
    let s = plan.stats();
    let steps: u64 = lengths.iter().map(|&l| u64::from(l)).sum();
    assert_eq!(s.steps, steps);
    assert_eq!(s.blocks, plan.num_blocks() as u64);
    assert_eq!(s.padding, s.blocks * u64::from(o.t_max) - steps);
    assert_eq!(s.deleted, 0);
    assert!(s.rounding_blocks < per_global_batch as u64);
    assert_eq!(s.rounding_padding, s.rounding_blocks * u64::from(o.t_max));
    assert!(s.blocks >= plan.stats().lower_bound.blocks);
    let empty = plan.blocks().filter(|b| b.is_empty()).count() as u64;
    assert_eq!(s.empty_blocks, empty);
    // Lanes end where their sequences do (tests/lanes.rs checks them); packed plans split and
    // leave blocks empty only where they must.
    if !o.policy.carries_state() {
        if s.pieces >= s.blocks {
            assert_eq!(
                empty, 0,
                "blocks left empty although there were pieces enough"
            );
        }
        let oversized = lengths.iter().filter(|&&l| l > o.t_max).count() as u64;
        assert_eq!(s.split_sequences, oversized);
    }

    // The per-step tables agree with the block table.
    let batch = plan.batch(0, 0).unwrap();
    let tables = batch.tables();
    let pieces: usize = batch.blocks().map(|b| b.len()).sum();
    let used: u32 = batch.blocks().map(|b| b.used()).sum();
    // With carried state (lanes), a piece that continues its sequence goes on from its row's
    // state instead of resetting.
    let carried = match o.policy.carries_state() {
        true => batch
            .blocks()
            .map(|b| b.pieces().filter(|p| p.continues).count())
            .sum(),
        false => 0,
    };
    assert_eq!(
        tables.reset.iter().filter(|&&r| r).count(),
        pieces - carried
    );
    assert_eq!(tables.carry.iter().filter(|&&c| c).count(), carried);
    assert_eq!(tables.valid.iter().filter(|&&v| v).count(), used as usize);
    assert_eq!(tables.cu_seqlens.len(), pieces + 1);
    assert_eq!(*tables.cu_seqlens.last().unwrap(), used as i32);
    for (&valid, &segment) in tables.valid.iter().zip(&tables.segment_ids) {
        assert_eq!(valid, segment >= 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn ddp_contract_holds(
        lengths in lengths_strategy(64, 300),
        options in options_strategy(1..=64, 1..=5),
        epoch in 0u64..4,
    ) {
        check_lengths_and_options(lengths, options, epoch)?;
    }

    #[test]
    fn ddp_contract_holds_for_long_blocks(
        lengths in lengths_strategy(9_000, 40_000),
        options in options_strategy(4_000..=20_000, 1..=5),
        epoch in 0u64..2,
    ) {
        check_lengths_and_options(lengths, options, epoch)?;
    }
}

fn check_lengths_and_options(
    lengths: Vec<u32>,
    options: Options,
    epoch: u64,
) -> Result<(), TestCaseError> {
    let longest = *lengths.iter().max().unwrap();
    let planner = match Planner::new(lengths.clone(), options.clone()) {
        Ok(planner) => planner,
        Err(err) => {
            // Only two refusals are possible for these inputs, and each must be deserved.
            if err.argument == "t_max" {
                prop_assert!(options.oversize == Oversize::Reject && longest > options.t_max);
                prop_assert!(!options.policy.carries_state(), "lanes take any length");
            } else {
                let argument = if options.blocks_per_batch == 1 {
                    "world_size"
                } else {
                    "world_size * blocks_per_batch"
                };
                prop_assert_eq!(err.argument.as_str(), argument, "{}", err);
                // Lanes cut no sequence into pieces of its own.
                let pieces: u64 = lengths
                    .iter()
                    .map(|&l| match options.policy.carries_state() {
                        true => 1,
                        false => u64::from(l.div_ceil(options.t_max)),
                    })
                    .sum();
                prop_assert!(pieces < options.blocks_per_global_batch());
            }
            return Ok(());
        }
    };
    let plan = planner.plan(epoch).unwrap();
    check_plan(&plan, &planner);
    // A pure function of its inputs: planning again, or on a fresh planner, gives the same.
    let again = Planner::new(lengths, options).unwrap().plan(epoch).unwrap();
    prop_assert_eq!(plan.hash(), again.hash());
    Ok(())
}

#[test]
fn more_pieces_than_blocks_fill_every_rounded_block() {
    // 5 blocks of 10 exactly; 4 ranks need 8 blocks: three are split off, none left empty.
    let mut options = Options::new(10);
    options.world_size = 4;
    let lengths = vec![5, 5, 4, 6, 3, 7, 2, 8, 1, 9];
    let planner = Planner::new(lengths, options).unwrap();
    let plan = planner.plan(0).unwrap();
    check_plan(&plan, &planner);
    assert_eq!(plan.stats().blocks, 8);
    assert_eq!(plan.stats().rounding_blocks, 3);
    assert_eq!(plan.stats().empty_blocks, 0);
}

#[test]
fn fewer_pieces_than_a_global_batch_has_blocks_are_refused() {
    // Three sequences, 2 ranks x 2 blocks: a block of every global batch would have no piece.
    let mut options = Options::new(10);
    options.world_size = 2;
    options.blocks_per_batch = 2;
    let err = Planner::new(vec![6, 7, 8], options).unwrap_err();
    assert_eq!(err.argument, "world_size * blocks_per_batch");
}

#[test]
fn rounding_leaves_counted_empty_blocks_when_pieces_run_out() {
    // Five sequences a block each (pad_to_max), 2 ranks x 2 blocks: 8 blocks, 3 of them empty.
    let mut options = Options::new(10);
    options.world_size = 2;
    options.blocks_per_batch = 2;
    options.policy = Policy::PadToMax;
    let planner = Planner::new(vec![6, 7, 8, 2, 3], options).unwrap();
    let plan = planner.plan(0).unwrap();
    check_plan(&plan, &planner);
    assert_eq!(plan.stats().empty_blocks, 3);
    assert_eq!(plan.stats().padding, 80 - 26);
}

#[test]
fn split_sequences_are_cut_into_t_max_chunks_and_a_tail() {
    let mut options = Options::new(10);
    options.oversize = Oversize::Split;
    let planner = Planner::new(vec![25, 3, 30], options).unwrap();
    let plan = planner.plan(0).unwrap();
    check_plan(&plan, &planner);
    let s = plan.stats();
    // 25 = 10 + 10 + 5; 30 = 10 + 10 + 10.
    assert_eq!((s.split_sequences, s.split_pieces, s.pieces), (2, 6, 7));
    let mut pieces: Vec<_> = plan
        .blocks()
        .flat_map(|b| b.pieces().collect::<Vec<_>>())
        .collect();
    pieces.sort_by_key(|p| (p.index, p.offset));
    let first = &pieces[0];
    assert_eq!(
        (first.index, first.offset, first.length, first.continues),
        (0, 0, 10, false)
    );
    let tail = &pieces[2];
    assert_eq!(
        (tail.index, tail.offset, tail.length, tail.continues),
        (0, 20, 5, true)
    );
    // Positions carry on across a split sequence's pieces.
    // One block per batch here: the batch that holds the tail's block.
    let batch = plan
        .rank_batches(0)
        .unwrap()
        .find(|b| {
            b.blocks()
                .any(|b| b.pieces().any(|p| p.index == 0 && p.offset == 20))
        })
        .unwrap();
    let positions = batch.tables().position_ids;
    let block = batch.blocks().next().unwrap();
    let start = block.pieces().find(|p| p.index == 0).unwrap().block_offset as usize;
    assert_eq!(&positions[start..start + 5], &[20, 21, 22, 23, 24]);
}

#[test]
fn small_hard_sets_end_within_one_block_of_the_bound_and_keep_the_contract() {
    // A few hundred lengths from t_max / 13 to t_max, where filling one block at a time ended up
    // to 2 blocks above the bound (and real sets 3): the improvement search brings each within
    // one block, and the plan is as valid and as reproducible as any.
    for (name, t_max, lengths) in hard_sets::hard_sets() {
        for world_size in [1, 4] {
            let mut options = Options::new(t_max);
            options.world_size = world_size;
            let planner = Planner::new(lengths.clone(), options).unwrap();
            let plan = planner.plan(0).unwrap();
            check_plan(&plan, &planner);
            let s = plan.stats();
            let packed = s.blocks - s.rounding_blocks;
            assert!(
                packed <= s.lower_bound.blocks_unrounded + 1,
                "{name}, {world_size} ranks: {packed} blocks, bound {}",
                s.lower_bound.blocks_unrounded
            );
            // The search depends on the lengths only: every epoch packs as many blocks.
            let again = planner.plan(1).unwrap();
            assert_eq!(again.stats().blocks, s.blocks, "{name}");
            assert_eq!(planner.plan(0).unwrap().hash(), plan.hash(), "{name}");
        }
    }
}
