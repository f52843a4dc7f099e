//! The planner's own tests: stats and rounding, and the table of what a `Planner` and an
//! `EpochPlan` can do (mod.rs) against the files.

use super::*;
use crate::options::Oversize;

/// The `pub fn`s of the `impl Planner` and `impl EpochPlan` blocks of one file's text.
fn public_methods(text: &str) -> Vec<String> {
    let mut inside = false;
    let mut names = Vec::new();
    for line in text.lines() {
        if line.starts_with("impl Planner") || line.starts_with("impl EpochPlan") {
            inside = true;
        } else if line.starts_with('}') {
            inside = false;
        } else if let Some(rest) = line.strip_prefix("    pub fn ").filter(|_| inside) {
            names.extend(rest.split(['(', '<']).next().map(str::to_string));
        }
    }
    names
}

#[test]
fn every_public_method_is_listed() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/plan");
    let table = std::fs::read_to_string(root.join("mod.rs")).unwrap();
    let mut folders = vec![root.clone()];
    let mut checked = 0;
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
                continue;
            }
            let relative = path
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .to_string();
            // A file's row names it, or its folder (`shared/`).
            let row_name = match relative.split_once('/') {
                Some((folder, _)) => format!("`{folder}/`"),
                None => format!("`{relative}`"),
            };
            let row = table
                .lines()
                .find(|line| line.starts_with("//! |") && line.ends_with(&format!("{row_name} |")));
            for method in public_methods(&std::fs::read_to_string(&path).unwrap()) {
                let row = row.unwrap_or_else(|| panic!("no row for {relative} ({method})"));
                assert!(
                    row.contains(&format!("`{method}`")),
                    "{method} of {relative}: {row}"
                );
                checked += 1;
            }
        }
    }
    assert!(
        checked >= 40,
        "{checked} methods found: the parse missed the impl blocks"
    );
}

fn options(t_max: u32, world_size: u32, blocks_per_batch: u32) -> Options {
    let mut options = Options::new(t_max);
    options.world_size = world_size;
    options.blocks_per_batch = blocks_per_batch;
    options
}

#[test]
fn stats_count_rounding_and_empty_blocks() {
    // Five full blocks for global batches of 4: three empty blocks of rounding padding.
    let plan = Planner::new(vec![10; 5], options(10, 2, 2))
        .unwrap()
        .plan(0)
        .unwrap();
    let stats = plan.stats();
    assert_eq!((stats.blocks, stats.padding), (8, 30));
    assert_eq!((stats.rounding_blocks, stats.rounding_padding), (3, 30));
    assert_eq!(stats.empty_blocks, 3);
    assert_eq!(plan.num_blocks(), 8);
    assert_eq!(plan.blocks().filter(|block| block.is_empty()).count(), 3);
}

#[test]
fn rounding_splits_blocks_before_adding_empty_ones() {
    // 4 + 6 fill one block exactly; a global batch of 2 takes it apart instead of padding.
    let plan = Planner::new(vec![4, 6], options(10, 2, 1))
        .unwrap()
        .plan(0)
        .unwrap();
    let stats = plan.stats();
    assert_eq!(
        (stats.blocks, stats.rounding_blocks, stats.empty_blocks),
        (2, 1, 0)
    );
    assert!(plan.blocks().all(|block| block.len() == 1));
}

#[test]
fn a_plan_accounts_for_every_step_and_depends_only_on_its_inputs() {
    let lengths: Vec<u32> = (0..300).map(|i| 1 + (i * 13) % 37).collect();
    let mut options = options(16, 3, 2);
    options.oversize = Oversize::Split;
    options.seed = 7;
    let planner = Planner::new(lengths.clone(), options).unwrap();
    let plan = planner.plan(2).unwrap();
    let stats = plan.stats();
    let steps: u64 = lengths.iter().map(|&length| u64::from(length)).sum();
    assert_eq!(stats.steps, steps);
    assert_eq!(stats.blocks as usize, plan.num_blocks());
    assert_eq!(stats.blocks % 6, 0);
    assert_eq!(stats.padding, stats.blocks * 16 - steps);
    let used: u64 = plan.blocks().map(|block| u64::from(block.used())).sum();
    assert_eq!(used, steps);
    let pieces: u64 = plan.blocks().map(|block| block.len() as u64).sum();
    assert_eq!((pieces, stats.pieces), (planner.pieces(), planner.pieces()));
    assert_eq!(
        stats.split_sequences,
        lengths.iter().filter(|&&l| l > 16).count() as u64
    );
    assert_eq!(plan.epoch(), 2);
    // The same inputs give the same plan; another epoch another one.
    assert_eq!(planner.plan(2).unwrap().hash(), plan.hash());
    assert_ne!(planner.plan(3).unwrap().hash(), plan.hash());
}

#[test]
fn a_later_epoch_of_the_kept_packing_is_the_epoch_of_a_fresh_planner() {
    // Lengths of up to most of a block, on which the improvement search runs (11,170 blocks
    // filled, 11,169 bound), and whose packing is kept; with and without a cap, and split
    // sequences.
    let lengths: Vec<u32> = (0..20000).map(|i| 60 + (i * 7919) % 300).collect();
    for (cap, oversize) in [(None, Oversize::Split), (Some(3), Oversize::Reject)] {
        let mut lengths = lengths.clone();
        if oversize == Oversize::Split {
            lengths.extend([900, 385, 1200]);
        }
        let mut options = options(384, 2, 4);
        options.max_pieces = cap;
        options.oversize = oversize;
        let warm = Planner::new(lengths.clone(), options.clone()).unwrap();
        let first = warm.plan(0).unwrap();
        assert!(matches!(warm.kept_packing.get(), Some(Some(_))), "{cap:?}");
        for epoch in [1, 5] {
            let fresh = Planner::new(lengths.clone(), options.clone()).unwrap();
            let expected = fresh.plan(epoch).unwrap();
            let kept = warm.plan(epoch).unwrap();
            assert_eq!(kept.hash(), expected.hash(), "{cap:?}, epoch {epoch}");
            assert_eq!(kept.stats(), expected.stats());
        }
        assert_eq!(warm.plan(0).unwrap().hash(), first.hash());
    }
}

#[test]
fn edges_of_the_rust_api_are_errors_naming_the_argument() {
    use crate::cost::{Cost, MAX_ATTENTION_LINEAR};
    use crate::options::MAX_SEED;
    use std::time::Duration;
    let planner = Planner::new(vec![3, 4, 5, 6, 7, 8, 9], options(10, 1, 1)).unwrap();
    // An epoch a checkpoint cannot hold (it saved u64::MAX as "no epoch yet").
    assert!(planner.plan(MAX_EPOCH as u64).is_ok());
    assert_eq!(
        planner.plan(MAX_EPOCH as u64 + 1).unwrap_err().argument,
        "epoch"
    );
    assert_eq!(planner.plan(u64::MAX).unwrap_err().argument, "epoch");
    // A block past the plan's.
    let plan = planner.plan(0).unwrap();
    assert!(plan.block(plan.num_blocks() - 1).is_ok());
    assert_eq!(
        plan.block(plan.num_blocks()).unwrap_err().argument,
        "position"
    );
    // Options no state could hold, or whose code would not round-trip.
    let mut too_large = options(10, 1, 1);
    too_large.seed = MAX_SEED + 1;
    assert_eq!(too_large.validate().unwrap_err().argument, "seed");
    too_large.seed = MAX_SEED;
    too_large.cost = Cost::Attention {
        linear: MAX_ATTENTION_LINEAR + 1,
    };
    assert_eq!(too_large.validate().unwrap_err().argument, "cost");
    // Weights whose sum is past f64's range: every share would be 0.
    let huge = |name: &str| Source::new(name.to_string(), vec![3; 10], f64::MAX);
    let err = Planner::with_sources(vec![huge("a"), huge("b")], options(10, 1, 1)).unwrap_err();
    assert_eq!(err.argument, "sources' weights");
    // A state's field given twice.
    let place = SamplerPlace {
        position: Some(plan.position(1).unwrap()),
        next_epoch: 1,
    };
    let mut fields: Vec<(String, StateValue)> = planner
        .sampler_state(&place)
        .into_iter()
        .map(|(name, value)| (name.to_string(), value))
        .collect();
    assert!(planner.resume_sampler_state(&fields, &|n| n.into()).is_ok());
    fields.push(("position".to_string(), StateValue::Int(0)));
    let err = planner
        .resume_sampler_state(&fields, &|n| n.into())
        .unwrap_err();
    assert_eq!(
        (err.argument.as_str(), err.value.as_str()),
        ("position", "given twice")
    );
    // A wait for a shared plan no writer would be waited for as long.
    let dir = std::env::temp_dir().join("bload-no-such-dir-for-this-test");
    let err = planner.map_shared_plan(0, &dir, Duration::MAX).unwrap_err();
    assert_eq!(err.argument, "timeout");
}
