use super::*;
use crate::options::Policy;
use crate::plan::{SamplerPlace, StateValue};

fn sources(weights: [f64; 3]) -> Vec<Source> {
    // Unlike sizes and lengths, so that every source is below or above its share.
    vec![
        Source::new(
            "web",
            (0..300).map(|i| 1 + (i * 7) % 19).collect(),
            weights[0],
        ),
        Source::new(
            "code",
            (0..40).map(|i| 3 + (i * 5) % 13).collect(),
            weights[1],
        ),
        Source::new(
            "books",
            (0..90).map(|i| 10 + (i * 3) % 11).collect(),
            weights[2],
        ),
    ]
}

fn options(world_size: u32) -> Options {
    let mut options = Options::new(20);
    options.world_size = world_size;
    options.blocks_per_batch = 2;
    options.seed = 5;
    options
}

fn planner(weights: [f64; 3], world_size: u32) -> Planner {
    Planner::with_sources(sources(weights), options(world_size)).unwrap()
}

#[test]
fn shares_are_within_one_sequence_of_the_weights() {
    let weights = [0.5, 0.3, 0.2];
    let planner = planner(weights, 2);
    let all = sources(weights);
    let total_steps: u64 = all
        .iter()
        .flat_map(|s| &s.lengths)
        .map(|&l| u64::from(l))
        .sum();
    for epoch in 0..3 {
        let stats = planner.source_stats(epoch).unwrap();
        assert_eq!(stats.len(), 3);
        for (source, stat) in all.iter().zip(&stats) {
            let target = (total_steps as f64 * stat.weight_share).round() as u64;
            let longest = u64::from(*source.lengths.iter().max().unwrap());
            assert!(
                stat.steps >= target && stat.steps < target + longest,
                "{stat:?} for a target of {target}"
            );
            let count = source.lengths.len() as u64;
            assert_eq!(stat.source_sequences, count);
            assert_eq!(stat.repeats, stat.sequences.saturating_sub(count));
            assert_eq!(stat.left_out, count.saturating_sub(stat.sequences));
        }
        // "code" (40 sequences) is far below half its share: repeated; "web" is above: drawn.
        assert!(
            stats[1].repeats > 0 && stats[1].left_out == 0,
            "{:?}",
            stats[1]
        );
        assert!(
            stats[0].left_out > 0 && stats[0].repeats == 0,
            "{:?}",
            stats[0]
        );
        let shares: f64 = stats.iter().map(|s| s.share).sum();
        assert!((shares - 1.0).abs() < 1e-9);
    }
}

#[test]
fn every_chosen_step_is_served_once_and_named_by_its_source() {
    let planner = planner([0.2, 0.5, 0.3], 3);
    let lengths = planner.lengths().to_vec();
    let mixture = planner.mixture.clone().unwrap();
    for epoch in 0..2 {
        let choice = planner.choose(&mixture, epoch).unwrap();
        let mut chosen = vec![0u64; lengths.len()];
        for &index in &choice.sequences {
            chosen[index as usize] += 1;
        }
        let plan = planner.plan(epoch).unwrap();
        let mut served = vec![0u64; lengths.len()];
        for block in plan.blocks() {
            for piece in block.pieces() {
                assert!(piece.offset + piece.length <= lengths[piece.index as usize]);
                served[piece.index as usize] += u64::from(piece.length);
            }
        }
        for (index, &length) in lengths.iter().enumerate() {
            assert_eq!(served[index], chosen[index] * u64::from(length), "{index}");
        }
        let stats = planner.source_stats(epoch).unwrap();
        let steps: u64 = stats.iter().map(|s| s.steps).sum();
        assert_eq!(plan.stats().steps, steps);
        assert_eq!(plan.stats().sequences, choice.sequences.len() as u64);
    }
    assert_eq!(planner.source_of(0).unwrap(), (0, 0));
    assert_eq!(planner.source_of(300).unwrap(), (1, 0));
    assert_eq!(planner.source_of(339).unwrap(), (1, 39));
    assert_eq!(planner.source_of(429).unwrap(), (2, 89));
    assert_eq!(planner.source_of(430).unwrap_err().argument, "index");
    assert_eq!(planner.source_starts(), [0, 300, 340, 430]);
    assert_eq!(planner.source_names(), ["web", "code", "books"]);
}

#[test]
fn plans_are_deterministic_and_differ_across_epochs() {
    let (one, other) = (planner([0.5, 0.3, 0.2], 2), planner([0.5, 0.3, 0.2], 2));
    assert_eq!(one.plan(4).unwrap().hash(), other.plan(4).unwrap().hash());
    assert_eq!(one.source_stats(4).unwrap(), other.source_stats(4).unwrap());
    assert_ne!(one.plan(4).unwrap().hash(), one.plan(5).unwrap().hash());
    let mixture = one.mixture.clone().unwrap();
    let (four, five) = (
        one.choose(&mixture, 4).unwrap(),
        one.choose(&mixture, 5).unwrap(),
    );
    assert_ne!(four.sequences, five.sequences);
    // Other weights choose otherwise, and say so in their fingerprint.
    let reweighted = planner([0.4, 0.4, 0.2], 2);
    assert_ne!(
        reweighted.plan(4).unwrap().hash(),
        one.plan(4).unwrap().hash()
    );
    assert_ne!(reweighted.mixture_hash(), one.mixture_hash());
    assert_eq!(one.mixture_hash(), other.mixture_hash());
    assert_eq!(
        one.mixture_text(),
        "\"web\" weight 0.5 (300 sequences), \"code\" weight 0.3 (40 sequences), \
         \"books\" weight 0.2 (90 sequences)"
    );
}

#[test]
fn every_policy_plans_a_mixture() {
    for policy in Policy::ALL {
        let mut options = options(2);
        options.policy = policy;
        let planner = Planner::with_sources(sources([1.0, 2.0, 1.0]), options).unwrap();
        let plan = planner.plan(1).unwrap();
        let used: u64 = plan.blocks().map(|b| u64::from(b.used())).sum();
        let steps: u64 = planner
            .source_stats(1)
            .unwrap()
            .iter()
            .map(|s| s.steps)
            .sum();
        assert_eq!(used, steps, "{policy}");
    }
}

fn where_(name: &str) -> String {
    format!("state['{name}']")
}

fn state_of(planner: &Planner, epoch: u64, batches: usize) -> Vec<(String, StateValue)> {
    let plan = planner.plan(epoch).unwrap();
    let place = SamplerPlace {
        position: Some(plan.position(batches).unwrap()),
        next_epoch: epoch + 1,
    };
    let fields = planner.sampler_state(&place);
    fields
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect()
}

#[test]
fn a_state_of_another_mixture_is_refused_by_name() {
    let planner = planner([0.5, 0.3, 0.2], 2);
    let state = state_of(&planner, 2, 3);
    let mixture = state.iter().find(|(name, _)| name == "mixture").unwrap();
    assert_eq!(mixture.1, StateValue::Text(planner.mixture_text()));
    let other = self::planner([0.4, 0.4, 0.2], 2);
    let err = other.resume_sampler_state(&state, &where_).unwrap_err();
    assert_eq!(err.argument, "state['mixture']");
    assert!(err.value.contains("weight 0.5"), "{err}");
    // One lengths set, the concatenation of the same sources: refused by the same field.
    let concatenated: Vec<u32> = sources([1.0; 3])
        .into_iter()
        .flat_map(|s| s.lengths)
        .collect();
    let single = Planner::new(concatenated, options(2)).unwrap();
    let err = single.resume_sampler_state(&state, &where_).unwrap_err();
    assert_eq!(
        (err.argument.as_str(), err.value.as_str()),
        (
            "state['mixture']",
            &*format!("{:?}", planner.mixture_text())
        )
    );
    let err = planner
        .resume_sampler_state(&state_of(&single, 2, 3), &where_)
        .unwrap_err();
    assert_eq!(
        (err.argument.as_str(), err.value.as_str()),
        ("state['mixture']", "\"none\"")
    );
}

#[test]
fn resuming_mid_epoch_equals_the_uninterrupted_epoch() {
    let planner = planner([0.5, 0.3, 0.2], 2);
    let plan = planner.plan(3).unwrap();
    let read = planner
        .resume_sampler_state(&state_of(&planner, 3, 2), &where_)
        .unwrap();
    let resumed = read.resumed.unwrap();
    assert_eq!((resumed.batches, read.next_epoch), (2, 4));
    assert_eq!(resumed.plan.hash(), plan.hash());
    for rank in 0..2 {
        for batch in 2..plan.batches_per_rank() {
            let tables = |p: &crate::plan::EpochPlan| p.batch(rank, batch).unwrap().table();
            assert_eq!(tables(&resumed.plan), tables(&plan));
        }
    }
    // On 3 ranks, the blocks not yet served, in their order, with the same sequences.
    let three = self::planner([0.5, 0.3, 0.2], 3);
    let rest = three.resume(&plan.position(2).unwrap()).unwrap().plan;
    let left: Vec<_> = (8..plan.num_blocks())
        .flat_map(|b| plan.block_at(b).pieces().collect::<Vec<_>>())
        .collect();
    let got: Vec<_> = rest
        .blocks()
        .flat_map(|b| b.pieces().collect::<Vec<_>>())
        .collect();
    assert_eq!(got, left);
}

#[test]
fn bad_sources_are_named_with_what_was_expected() {
    let bad = |edit: &dyn Fn(&mut Vec<Source>)| {
        let mut all = sources([1.0; 3]);
        edit(&mut all);
        Planner::with_sources(all, options(1)).unwrap_err()
    };
    for weight in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let err = bad(&|all| all[1].weight = weight);
        assert_eq!(err.argument, "sources[1].weight");
        assert_eq!(err.value, weight.to_string());
        assert!(err.expected.contains("above 0"), "{err}");
    }
    let err = bad(&|all| all[2].lengths.clear());
    assert_eq!(err.argument, "sources[2].lengths");
    assert!(err.expected.contains("no steps"), "{err}");
    let err = bad(&|all| all.clear());
    assert_eq!(err.argument, "sources");
    let err = bad(&|all| all[2].name = "web".into());
    assert_eq!(
        (err.argument.as_str(), err.value.as_str()),
        ("sources[2].name", "\"web\"")
    );
    let err = bad(&|all| all[1].lengths[7] = 0);
    assert_eq!(err.argument, "sources[1].lengths[7]");
    // Too long for t_max: the planner's own error, naming the option.
    let err = bad(&|all| all[2].lengths[4] = 21);
    assert_eq!(err.argument, "t_max");
}
