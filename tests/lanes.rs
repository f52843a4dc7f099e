//! The `lanes` policy's contract, over random lengths and options: every rank the same batch
//! count; row `j` of rank `r` is lane `r * B + j` for the whole epoch; each lane is whole
//! sequences end to end, `t_max` steps a batch, padded only at its end; every step of every
//! sequence exactly once; a piece continues its sequence only at the start of a row, right after
//! the same lane's previous batch ended in it. Then efficiency on the bundled data sets.

use bload::{Column, EpochPlan, Options, Planner, Policy};
use proptest::prelude::*;

use crate::common::data;
use data::data;

fn lanes_options(t_max: u32, world_size: u32, blocks_per_batch: u32, seed: u64) -> Options {
    let mut options = Options::new(t_max);
    options.world_size = world_size;
    options.blocks_per_batch = blocks_per_batch;
    options.seed = seed;
    options.policy = Policy::Lanes;
    options
}

/// Every lane's steps in order, `(sequence, offset, length)` per piece, read batch by batch
/// through the ranks' shards; checks the shape of the batches on the way.
fn lanes_of(plan: &EpochPlan) -> Vec<Vec<(u32, u32, u32)>> {
    let o = plan.options();
    let (blocks_per_batch, t_max) = (o.blocks_per_batch as usize, o.t_max);
    let mut lanes = vec![Vec::new(); o.world_size as usize * blocks_per_batch];
    // Where each lane's padding began: after it, the lane holds nothing.
    let mut ended = vec![false; lanes.len()];
    let batches = plan.batches_per_rank();
    for rank in 0..o.world_size {
        let rank_batches: Vec<_> = plan.rank_batches(rank).unwrap().collect();
        assert_eq!(rank_batches.len(), batches);
    }
    for batch in 0..batches {
        for rank in 0..o.world_size {
            let blocks: Vec<_> = plan.batch(rank, batch).unwrap().blocks().collect();
            assert_eq!(blocks.len(), blocks_per_batch);
            for (row, block) in blocks.iter().enumerate() {
                let lane = rank as usize * blocks_per_batch + row;
                let mut at = 0;
                for piece in block.pieces() {
                    assert!(!ended[lane], "lane {lane}: steps after its padding");
                    assert_eq!(piece.block_offset, at);
                    // A continuing piece opens its row, and the lane's last piece was its start.
                    if piece.continues {
                        assert_eq!(at, 0, "lane {lane}: a continuing piece inside a row");
                        let &(sequence, offset, length) = lanes[lane].last().unwrap();
                        assert_eq!((sequence, offset + length), (piece.index, piece.offset));
                    }
                    lanes[lane].push((piece.index, piece.offset, piece.length));
                    at += piece.length;
                }
                assert!(at <= t_max);
                if at < t_max {
                    ended[lane] = true;
                }
            }
        }
    }
    lanes
}

fn check_lanes(plan: &EpochPlan, lengths: &[u32]) {
    let lanes = lanes_of(plan);
    let mut served = vec![0u64; lengths.len()];
    let mut longest_lane = 0;
    for lane in &lanes {
        let mut steps = 0u64;
        for (i, &(sequence, offset, length)) in lane.iter().enumerate() {
            let next = lane.get(i + 1);
            // Pieces of a sequence are consecutive in its lane, and it ends before another starts.
            let ends = offset + length == lengths[sequence as usize];
            assert_eq!(ends, next.is_none_or(|&(s, o, _)| s != sequence || o == 0));
            if !ends {
                assert_eq!(next.map(|n| n.0), Some(sequence));
            }
            served[sequence as usize] += u64::from(length);
            steps += u64::from(length);
        }
        longest_lane = longest_lane.max(steps);
    }
    assert_eq!(
        served,
        lengths.iter().map(|&l| u64::from(l)).collect::<Vec<_>>()
    );
    let o = plan.options();
    let s = plan.stats();
    let t_max = u64::from(o.t_max);
    // Just enough batches for the longest lane; padding only at lanes' ends.
    assert_eq!(
        plan.batches_per_rank() as u64,
        longest_lane.div_ceil(t_max).max(1)
    );
    assert_eq!(s.padding, s.blocks * t_max - s.steps);
    assert!(s.blocks >= s.lower_bound.blocks);
    assert_eq!((s.rounding_blocks, s.deleted), (0, 0));
    let pieces: usize = lanes.iter().map(Vec::len).sum();
    assert_eq!(s.pieces, pieces as u64);
}

/// A recurrence run symbolically through every rank's batches by `state_in` and `state_out`
/// alone: a piece's state is (sequence, steps run), a lane keeps the final state of the piece
/// `state_out` names, and every piece must start from its own sequence at its own offset (the
/// lane's state where `state_in` names its row, else zeros, a fresh start).
fn check_carried_states(plan: &EpochPlan) {
    let o = plan.options();
    let rows = o.blocks_per_batch as usize;
    for rank in 0..o.world_size {
        let mut lane_states: Vec<Option<(i64, i64)>> = vec![None; rows];
        let mut carried_next = vec![false; rows];
        for batch in 0..plan.batches_per_rank() {
            let batch = plan.batch(rank, batch).unwrap();
            let (table, tables) = (batch.table(), batch.tables());
            assert_eq!(tables.state_in.len(), table.len());
            assert_eq!(
                tables.carry, carried_next,
                "state_out says which rows carry next"
            );
            let mut finals = Vec::with_capacity(table.len());
            for (row, &state_in) in table.iter().zip(&tables.state_in) {
                let (sequence, offset) = (Column::Sequence.of(row), Column::Offset.of(row));
                let length = Column::Length.of(row);
                let initial = usize::try_from(state_in)
                    .map(|lane| lane_states[lane])
                    .unwrap_or(None);
                let expected = (offset > 0).then_some((sequence, offset));
                assert_eq!(initial, expected, "the initial state of {row:?}");
                finals.push(Some((sequence, offset + length)));
            }
            for (lane, &state_out) in tables.state_out.iter().enumerate() {
                carried_next[lane] = state_out >= 0;
                if let Ok(piece) = usize::try_from(state_out) {
                    lane_states[lane] = finals[piece];
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn the_lane_contract_holds(
        lengths in prop::collection::vec(prop_oneof![4 => 1u32..=40, 1 => 40u32..=400], 1..200),
        t_max in 1u32..=64,
        world_size in 1u32..=4,
        blocks_per_batch in 1u32..=4,
        seed in 0..=bload::MAX_SEED,
        epoch in 0u64..3,
    ) {
        let options = lanes_options(t_max, world_size, blocks_per_batch, seed);
        let lanes = options.blocks_per_global_batch() as usize;
        match Planner::new(lengths.clone(), options.clone()) {
            Err(err) => {
                // The one refusal: fewer sequences than lanes.
                prop_assert!(lengths.len() < lanes, "{}", err);
                prop_assert!(err.argument.starts_with("world_size"), "{}", err);
            }
            Ok(planner) => {
                let plan = planner.plan(epoch).unwrap();
                check_lanes(&plan, &lengths);
                check_carried_states(&plan);
                let again = Planner::new(lengths, options).unwrap().plan(epoch).unwrap();
                prop_assert_eq!(plan.hash(), again.hash());
            }
        }
    }
}

#[test]
fn lanes_change_with_the_epoch_and_seed_but_not_their_cost_much() {
    let lengths: Vec<u32> = (0..500).map(|i| 1 + (i * 37) % 211).collect();
    let planner = Planner::new(lengths.clone(), lanes_options(16, 2, 3, 1)).unwrap();
    let (a, b) = (planner.plan(0).unwrap(), planner.plan(1).unwrap());
    assert_ne!(a.hash(), b.hash());
    let other_seed = Planner::new(lengths, lanes_options(16, 2, 3, 2)).unwrap();
    assert_ne!(a.hash(), other_seed.plan(0).unwrap().hash());
    for plan in [&a, &b] {
        assert!(plan.stats().blocks <= plan.stats().lower_bound.blocks + 6);
    }
}

#[test]
fn a_sequence_many_times_t_max_runs_whole_through_one_lane() {
    let lengths = vec![1000, 3, 5, 7];
    let plan = Planner::new(lengths.clone(), lanes_options(10, 2, 1, 0))
        .unwrap()
        .plan(0)
        .unwrap();
    // The long sequence fills a lane for 100 batches; the three short ones share the other.
    assert_eq!(plan.batches_per_rank(), 100);
    assert_eq!(plan.stats().lower_bound.blocks, 200);
    assert_eq!(plan.stats().blocks, 200);
    check_lanes(&plan, &lengths);
    check_carried_states(&plan);
    let lanes = lanes_of(&plan);
    let long_lane = lanes.iter().find(|lane| lane[0].0 == 0).unwrap();
    assert_eq!(long_lane.len(), 100);
    assert_eq!(plan.stats().split_sequences, 1);
    assert_eq!(plan.stats().split_pieces, 100);
}

#[test]
fn speech_at_t_max_2450_on_8_ranks_of_8_rows_is_at_least_99_percent_real() {
    let plan = Planner::new(data("speech_like.lengths"), lanes_options(2450, 8, 8, 0))
        .unwrap()
        .plan(0)
        .unwrap();
    let stats = plan.stats();
    assert!(stats.efficiency >= 0.99, "{stats:?}");
    check_lanes(&plan, &data("speech_like.lengths"));
}

#[test]
fn lanes_are_within_one_percent_of_their_bound_on_every_set() {
    let files = [
        "action_genome_like.lengths",
        "speech_like.lengths",
        "text_like.lengths",
    ];
    for file in files {
        let lengths = data(file);
        for t_max in [64, 128, 256, 512, 1024, 2048, 4096] {
            for (world_size, blocks_per_batch) in [(1, 1), (2, 4), (8, 8)] {
                let options = lanes_options(t_max, world_size, blocks_per_batch, 0);
                let planner = Planner::new(lengths.clone(), options).unwrap();
                let stats = planner.plan(0).unwrap().stats().clone();
                let bound = stats.lower_bound.blocks;
                assert!(
                    stats.blocks * 100 <= bound * 101,
                    "{file} t_max {t_max}, {world_size} x {blocks_per_batch}: {} blocks, bound {bound}",
                    stats.blocks
                );
            }
        }
    }
}

#[test]
fn lanes_resume_with_their_lane_count_whatever_its_factors() {
    let lengths: Vec<u32> = (0..300).map(|i| 1 + (i * 13) % 50).collect();
    let planner = Planner::new(lengths.clone(), lanes_options(8, 2, 2, 0)).unwrap();
    let plan = planner.plan(1).unwrap();
    let at = plan.position(3).unwrap();
    let resumed = planner.resume(&at).unwrap();
    assert_eq!((resumed.batches, resumed.plan.hash()), (3, plan.hash()));
    // The same 4 lanes as 1 rank of 4 rows or 4 ranks of 1: the same lanes, from batch 3.
    for (world_size, blocks_per_batch) in [(1, 4), (4, 1)] {
        let options = lanes_options(8, world_size, blocks_per_batch, 0);
        let resumed = Planner::new(lengths.clone(), options)
            .unwrap()
            .resume(&at)
            .unwrap();
        assert_eq!(resumed.batches, 3);
        assert_eq!(lanes_of(&resumed.plan), lanes_of(&plan));
    }
    // Past the epoch's end: refused, with its bound.
    let mut past = at;
    past.batches = plan.batches_per_rank() as u64 + 1;
    let err = planner.resume(&past).unwrap_err();
    assert_eq!(err.argument, "batches");
    assert!(err.expected.starts_with("from 0 to "), "{err}");
    // Another lane count: refused, naming it.
    let other = Planner::new(lengths, lanes_options(8, 4, 2, 0)).unwrap();
    let err = other.resume(&at).unwrap_err();
    assert_eq!(err.argument, "world_size * blocks_per_batch");
    assert!(err.to_string().contains("lane count it saved"), "{err}");
}
