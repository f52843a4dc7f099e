//! The bridge's own checks: values from C++ are validated, panics become errors, and the
//! shared types carry the core's values by name.

use super::*;
use crate::guard::guarded;
use bload::Column;

mod tables;

fn options(t_max: i64) -> PlanOptions {
    default_plan_options(t_max)
}

#[test]
fn defaults_are_the_cores() {
    let o = options(94);
    assert_eq!(
        (o.t_max, o.blocks_per_batch, o.world_size, o.seed),
        (94, 1, 1, 0)
    );
    assert!(o.policy == bload::Policy::BestFit.code() && !o.split_oversized);
    assert_eq!(o.max_pieces, -1);
}

#[test]
fn max_pieces_travels_as_minus_one_or_a_count() {
    let mut o = options(94);
    o.max_pieces = 3;
    assert_eq!(bload::Options::try_from(&o).unwrap().max_pieces, Some(3));
    assert!(plan_options_to_json(&o)
        .unwrap()
        .contains("\"max_pieces\":3"));
    for bad in [0, -2, 1 << 40] {
        o.max_pieces = bad;
        let err = bload::Options::try_from(&o).unwrap_err();
        assert_eq!(err.argument, "max_pieces", "{bad}");
    }
    o.max_pieces = -1;
    assert_eq!(bload::Options::try_from(&o).unwrap().max_pieces, None);
}

#[test]
fn negative_values_are_named_errors() {
    let error = new_planner(&[3, -2], &options(4)).err().unwrap();
    assert_eq!(
        error.to_string(),
        "lengths[1] = -2: expected a length from 1 to 4294967295 steps"
    );
    let error = new_planner(&[3], &options(-1)).err().unwrap();
    assert_eq!(
        error.to_string(),
        "t_max = -1: expected from 1 to 16777216 steps"
    );
    let mut ranks = options(4);
    ranks.world_size = 0;
    let error = new_planner(&[3], &ranks).err().unwrap();
    assert_eq!(
        error.to_string(),
        "world_size = 0: expected from 1 to 4294967295 ranks"
    );
    let planner = new_planner(&[3, 2], &options(4)).unwrap();
    let error = planner.plan_epoch(-1).err().unwrap();
    assert!(error.to_string().starts_with("epoch = -1: "), "{error}");
}

#[test]
fn policies_cross_by_name_and_code() {
    for name in bload::Policy::ALL.map(bload::Policy::name) {
        assert_eq!(policy_of_code(policy_code(name).unwrap()).unwrap(), name);
    }
    assert!(policy_code("tetris").is_err());
    let error = policy_of_code(9).err().unwrap();
    assert!(error.to_string().starts_with("policy = 9: "), "{error}");
    let mut plan = options(4);
    plan.policy = 9;
    assert!(new_planner(&[3, 2], &plan).is_err());
}

#[test]
fn a_panic_becomes_an_error() {
    let result: Result<(), _> = guarded("test", || panic!("boom"));
    assert_eq!(
        result.unwrap_err().to_string(),
        "internal error in bload (test): boom; please report it"
    );
}

#[test]
fn batch_tables_cover_every_sequence_once() {
    let mut opts = options(10);
    opts.world_size = 2;
    let planner = new_planner(&[7, 3, 5, 5, 9, 1, 4, 6], &opts).unwrap();
    let plan = planner.plan_epoch(0).unwrap();
    let mut seen = Vec::new();
    for rank in 0..2 {
        for batch in 0..plan.batches_per_rank() as i64 {
            let cells = plan.batch_table(rank, batch).unwrap();
            for row in cells.chunks(Column::COUNT) {
                assert_eq!(row[Column::Block as usize], 0);
                seen.push(row[Column::Sequence as usize]);
            }
            check_block_table(&cells, 1, 10).unwrap();
        }
    }
    seen.sort();
    assert_eq!(seen, (0..8).collect::<Vec<_>>());
    let error = plan.batch_table(2, 0).err().unwrap();
    assert!(error.to_string().starts_with("rank = 2: "), "{error}");
    let error = plan.batch_table(-1, 0).err().unwrap();
    assert!(error.to_string().starts_with("rank = -1: "), "{error}");
}

#[test]
fn stats_cross_by_name() {
    let planner = new_planner(&[7, 3, 5, 5, 9, 1, 4, 6], &options(10)).unwrap();
    let plan = planner.plan_epoch(0).unwrap();
    let stats = plan.stats();
    let core = planner.0.plan(0).unwrap();
    assert_eq!(stats.padding, core.stats().padding);
    assert_eq!(stats.lower_bound_blocks, core.stats().lower_bound.blocks);
    let counts = plan.stat_counts();
    let padding = counts.iter().find(|c| c.name == "padding").unwrap();
    assert_eq!(padding.value, stats.padding);
}

#[test]
fn table_writers_check_the_table_and_the_buffer() {
    let table = [0, 0, 3, 5, 0, 3];
    let mut reset = [false; 4];
    write_reset_mask(&table, 1, 4, false, &mut reset).unwrap();
    assert_eq!(reset, [true, false, false, false]);
    let error = write_valid_mask(&table, 1, 2, &mut [false; 2])
        .err()
        .unwrap();
    assert_eq!(
        error.to_string(),
        "table[0, length] = 3: expected from 1 to t_max - block_offset = 2"
    );
    let error = write_segment_ids(&table, 1, 4, &mut [0; 3]).err().unwrap();
    assert!(
        error.to_string().starts_with("segment_ids = 3 values"),
        "{error}"
    );
    assert_eq!(table_column_names()[3], "sequence");
}

#[test]
fn options_cross_as_the_cores_json() {
    let mut o = options(94);
    o.world_size = 3;
    o.policy = bload::Policy::RandomFill.code();
    let text = plan_options_to_json(&o).unwrap();
    assert!(text.contains("\"policy\":\"random_fill\""), "{text}");
    let back = plan_options_from_json(&text).unwrap();
    assert_eq!((back.t_max, back.world_size), (94, 3));
    assert!(back.policy == bload::Policy::RandomFill.code());
    assert!(plan_options_from_json("{").is_err());
}

#[test]
fn positions_cross_checked_and_resume_on_another_world_size() {
    let lengths: Vec<i64> = (0..60).map(|i| 1 + (i * 7) % 10).collect();
    let mut three = options(10);
    three.world_size = 3;
    let plan = new_planner(&lengths, &three)
        .unwrap()
        .plan_epoch(2)
        .unwrap();
    let position = plan.position(1).unwrap();
    assert_eq!(
        (
            position.epoch,
            position.planned_world_size,
            position.first_block
        ),
        (2, 3, 0)
    );
    assert_eq!((position.world_size, position.batches), (3, 1));
    let mut two = options(10);
    two.world_size = 2;
    let planner = new_planner(&lengths, &two).unwrap();
    let resumed = planner.resume_epoch(&position).unwrap();
    assert_eq!(resumed.batches, 0);
    let rest = resumed.plan.position(0).unwrap();
    assert_eq!(
        (rest.planned_world_size, rest.first_block, rest.world_size),
        (3, 3, 2)
    );

    let error = plan.position(-1).err().unwrap();
    assert!(
        error
            .to_string()
            .starts_with("batches = -1: expected from 0 to "),
        "{error}"
    );
    for (edit, message) in [
        (
            (|p: &mut EpochPosition| p.epoch = -3) as fn(&mut EpochPosition),
            "epoch = -3: ",
        ),
        (
            |p| p.planned_world_size = 0,
            "planned_world_size = 0: expected from 1 to 4294967295 ranks",
        ),
        (|p| p.first_block = -1, "first_block = -1: "),
        (|p| p.world_size = -2, "world_size = -2: "),
        (
            |p| p.blocks_per_batch = 0,
            "blocks_per_batch = 0: expected from 1 to 4294967295 blocks",
        ),
        (
            |p| p.batches = 1 << 40,
            "batches = 1099511627776: expected from 0 to ",
        ),
    ] {
        let mut bad = position.clone();
        edit(&mut bad);
        let error = planner.resume_epoch(&bad).err().unwrap();
        assert!(error.to_string().starts_with(message), "{error}");
    }
}

#[test]
fn the_stable_hash_is_the_cores() {
    assert_eq!(stable_hash(&[1, 2, 3]), 0xda2b_fb22_5e0d_1f05);
    assert_eq!(stable_hash(&[1, 2, 3]), bload::stable_hash(&[1, 2, 3]));
}

#[test]
fn options_are_checked_against_the_bounds_python_is_given() {
    let bounds = option_bounds();
    for bound in &bounds {
        if bound.name == "epoch" {
            continue;
        }
        for value in [bound.low - 1, bound.high.saturating_add(1)] {
            if value < bound.low || (value > bound.high && bound.high < i64::MAX) {
                let mut o = options(94);
                match bound.name.as_str() {
                    "t_max" => o.t_max = value,
                    "blocks_per_batch" => o.blocks_per_batch = value,
                    "world_size" => o.world_size = value,
                    "seed" => o.seed = value,
                    other => panic!("an option without a test: {other}"),
                }
                let message = new_planner(&[1], &o).err().unwrap().to_string();
                let expected = format!(
                    "{} = {value}: expected from {} to {}",
                    bound.name, bound.low, bound.high
                );
                assert!(message.starts_with(&expected), "{message}");
            }
        }
    }
}

#[test]
fn costs_cross_as_the_cores_code_and_bad_ones_are_named() {
    let o = options(94);
    assert_eq!(o.cost, -1);
    let err = cost_code("attention:x").unwrap_err().to_string();
    assert!(
        err.contains("cost = \"attention:x\": expected \"steps\" or \"attention:A\""),
        "{err}"
    );
    assert_eq!(cost_code("steps").unwrap(), -1);
    assert_eq!(
        cost_of_code(cost_code("attention:7").unwrap()).unwrap(),
        "attention:7"
    );
    assert!(cost_of_code(-5).is_err());
    // A planner takes the cost's code, and refuses one the core does not know, naming it.
    let mut o = options(10);
    o.cost = cost_code("attention:1").unwrap();
    let planner = new_planner(&[3, 4, 10], &o).unwrap();
    assert_eq!(
        planner.0.options().cost,
        bload::Cost::Attention { linear: 1 }
    );
    o.cost = -7;
    let err = new_planner(&[3, 4, 10], &o).err().unwrap().to_string();
    assert!(err.contains("cost = -7"), "{err}");
    // And it travels in the options' JSON, by name.
    o.cost = 2;
    let json = plan_options_to_json(&o).unwrap();
    assert!(json.contains("\"cost\":\"attention:2\""), "{json}");
    assert_eq!(plan_options_from_json(&json).unwrap().cost, 2);
}
