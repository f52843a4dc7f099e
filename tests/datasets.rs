//! The bundled length sets: the paper's Table I, and best_fit's padding against the lower bound.

use bload::stats::{mix, truncate};
use bload::{Options, Oversize, Planner, Policy};

use crate::common::data;
use data::data;

#[test]
fn action_genome_reproduces_table_one() {
    let lengths = data("action_genome_like.lengths");
    let options = Options::new(94);
    let planner = Planner::new(lengths.clone(), options.clone()).unwrap();
    assert_eq!((lengths.len(), planner.steps()), (7_464, 166_785));
    let pad_to_max = Options {
        policy: Policy::PadToMax,
        ..options.clone()
    };
    let padded = Planner::new(lengths.clone(), pad_to_max)
        .unwrap()
        .plan(0)
        .unwrap();
    assert_eq!(padded.stats().padding, 534_831);
    let cut = truncate(&lengths, 10, &options).unwrap();
    assert_eq!(cut.deleted, 92_271);
    let mixed = mix(&lengths, 22, &options).unwrap();
    assert_eq!((mixed.padding, mixed.deleted), (37_712, 40_289));
}

#[test]
fn action_genome_best_fit_is_within_1_2x_of_the_ddp_floor() {
    let mut options = Options::new(94);
    options.world_size = 8;
    for epoch in 0..3 {
        let plan = Planner::new(data("action_genome_like.lengths"), options.clone())
            .unwrap()
            .plan(epoch)
            .unwrap();
        let bound = plan.stats().lower_bound;
        assert_eq!((bound.blocks, bound.padding), (1_776, 159));
        assert!(
            plan.stats().padding <= 191,
            "epoch {epoch}: {:?}",
            plan.stats()
        );
    }
    // On one rank, the floor itself: 1,775 blocks, 65 padding steps.
    let plan = Planner::new(data("action_genome_like.lengths"), Options::new(94))
        .unwrap()
        .plan(0)
        .unwrap();
    assert_eq!((plan.stats().blocks, plan.stats().padding), (1_775, 65));
}

#[test]
fn best_fit_is_within_one_percent_of_the_bound_on_every_set() {
    for (file, t_max) in [
        ("action_genome_like.lengths", 94),
        ("speech_like.lengths", 2_450),
        ("text_like.lengths", 2_048),
        ("text_like.lengths", 512),
        ("text_like.lengths", 8_192),
    ] {
        for world_size in [1, 8] {
            let mut options = Options::new(t_max);
            options.world_size = world_size;
            options.oversize = Oversize::Split;
            let plan = Planner::new(data(file), options).unwrap().plan(0).unwrap();
            let (blocks, bound) = (plan.stats().blocks, plan.stats().lower_bound.blocks);
            assert!(
                blocks * 100 <= bound * 101,
                "{file} t_max {t_max} world {world_size}: {blocks} blocks, bound {bound}"
            );
        }
    }
}

#[test]
fn best_fit_never_needs_more_blocks_than_seqpackers_best_fit_decreasing() {
    use seqpacker::{PackStrategy, Packer};
    // Including block sizes where the bound is out of reach (speech at 3,000 and 4,096 steps:
    // lengths are a large share of a block, and the L2 bound is loose there).
    for (file, t_max) in [
        ("action_genome_like.lengths", 94),
        ("action_genome_like.lengths", 150),
        ("speech_like.lengths", 2_450),
        ("speech_like.lengths", 3_000),
        ("speech_like.lengths", 4_096),
        ("text_like.lengths", 47_992),
    ] {
        let lengths = data(file);
        let plan = Planner::new(lengths.clone(), Options::new(t_max))
            .unwrap()
            .plan(0)
            .unwrap();
        let sizes: Vec<usize> = lengths.iter().map(|&l| l as usize).collect();
        let packer =
            Packer::new(t_max as usize).with_strategy(PackStrategy::OptimizedBestFitDecreasing);
        let theirs = packer.pack_lengths(&sizes).unwrap().packs.len() as u64;
        assert!(
            plan.stats().blocks <= theirs,
            "{file} t_max {t_max}: {} > {theirs}",
            plan.stats().blocks
        );
    }
}

#[test]
fn best_fit_pads_less_than_the_papers_random_fill() {
    for (file, t_max) in [
        ("action_genome_like.lengths", 94),
        ("speech_like.lengths", 2_450),
        ("text_like.lengths", 2_048),
    ] {
        let mut options = Options::new(t_max);
        options.oversize = Oversize::Split;
        let best = Planner::new(data(file), options.clone())
            .unwrap()
            .plan(0)
            .unwrap();
        options.policy = Policy::RandomFill;
        let random = Planner::new(data(file), options).unwrap().plan(0).unwrap();
        assert!(best.stats().padding < random.stats().padding, "{file}");
    }
}

#[test]
fn epochs_change_company_and_order_but_not_cost() {
    let planner = Planner::new(data("action_genome_like.lengths"), Options::new(94)).unwrap();
    let (first, second) = (planner.plan(0).unwrap(), planner.plan(1).unwrap());
    assert_ne!(first.hash(), second.hash());
    assert_eq!(first.stats().padding, second.stats().padding);
    // Which sequences share a block: few pairs survive from one epoch to the next.
    let pairs = |plan: &bload::EpochPlan| {
        let mut pairs = std::collections::HashSet::new();
        for block in plan.blocks() {
            let members: Vec<u32> = block.pieces().map(|p| p.index).collect();
            for (i, &a) in members.iter().enumerate() {
                for &b in &members[i + 1..] {
                    pairs.insert((a.min(b), a.max(b)));
                }
            }
        }
        pairs
    };
    let (before, after) = (pairs(&first), pairs(&second));
    let kept = before.intersection(&after).count();
    assert!(
        kept * 10 < before.len(),
        "{kept} of {} pairs kept",
        before.len()
    );
    // Block order: the first block of epoch 0 is not the first block of epoch 1.
    let firsts = |plan: &bload::EpochPlan| plan.block(0).unwrap().pieces().collect::<Vec<_>>();
    assert_ne!(firsts(&first), firsts(&second));
}
