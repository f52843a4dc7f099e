//! The `bload` command line, run as a user would.

use crate::cli_support;
use std::path::PathBuf;

use cli_support::{bload, bload_args};
use std::process::Output;

fn stdout_json(output: &Output) -> serde_json::Value {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout.clone()).unwrap();
    assert_eq!(
        text.trim().lines().count(),
        1,
        "exactly one JSON object: {text}"
    );
    serde_json::from_str(&text).unwrap()
}

#[test]
fn stats_json_reproduces_table_one_and_the_ddp_target() {
    let out = stdout_json(&bload(
        "stats --lengths AG --t-max 94 --world-size 8 --truncate-to 10 --mix-to 22 --json",
    ));
    assert_eq!(out["lower_bound_padding"], 159);
    let policies = out["policies"].as_object().unwrap();
    let mut names: Vec<&str> = policies.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "best_fit",
            "lanes",
            "mix",
            "pad_to_max",
            "random_fill",
            "truncate"
        ]
    );
    for row in policies.values() {
        for key in ["blocks", "padding", "deleted"] {
            assert!(row[key].is_u64(), "{key} in {row}");
        }
        assert!(row["efficiency"].is_f64() && row["plan_ms"].is_f64());
    }
    assert_eq!(policies["pad_to_max"]["padding"], 534_831);
    assert_eq!(policies["truncate"]["deleted"], 92_271);
    assert_eq!(policies["mix"]["padding"], 37_712);
    assert_eq!(policies["mix"]["deleted"], 40_289);
    assert!(policies["best_fit"]["padding"].as_u64().unwrap() <= 191);
    assert_eq!(policies["best_fit"]["deleted"], 0);
}

#[test]
fn stats_defaults_truncation_to_the_mean_length() {
    // 166,785 steps over 7,464 sequences: mean 22.3, rounded down to 22.
    let out = stdout_json(&bload("stats --lengths AG --t-max 94 --json"));
    assert_eq!(out["policies"]["mix"]["padding"], 37_712);
    let table = bload("stats --lengths AG --t-max 94");
    let text = String::from_utf8(table.stdout).unwrap();
    assert!(
        text.contains("mix(22)") && text.contains("truncate(22)"),
        "{text}"
    );
}

/// The words of the table row that starts with `label`.
fn table_row<'a>(text: &'a str, label: &str) -> Vec<&'a str> {
    let line = text.lines().find(|line| line.starts_with(label));
    line.unwrap_or_else(|| panic!("no {label} row: {text}"))
        .split_whitespace()
        .collect()
}

#[test]
fn stats_plans_what_it_can_when_sequences_are_longer_than_t_max() {
    // 22 of the Action-Genome-shaped sequences are longer than 93 steps: lanes plans them, the
    // other policies would need --split, and each of their rows says so.
    let why = "needs --split: 22 sequences are longer than t_max";
    let out = bload("stats --lengths AG --t-max 93 --world-size 2");
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    for label in ["best_fit", "random_fill", "pad_to_max", "lower bound"] {
        let line = text.lines().find(|line| line.starts_with(label)).unwrap();
        assert_eq!(
            line.strip_prefix(label).unwrap().trim_start(),
            why,
            "{text}"
        );
    }
    let lanes = table_row(&text, "lanes ");
    // The figures `plan` gives for lanes: blocks over all ranks, padding.
    let plan = bload("plan --lengths AG --t-max 93 --world-size 2 --policy lanes --rank 0");
    let plan = String::from_utf8(plan.stdout).unwrap();
    let counts = format!("lanes, {} blocks, {} padding steps", lanes[1], lanes[2]);
    assert!(plan.lines().next().unwrap().contains(&counts), "{plan}");
    assert_eq!(table_row(&text, "lanes bound").len(), 4, "{text}");
    for label in ["truncate(22)", "mix(22)"] {
        assert_eq!(table_row(&text, label).len(), 7, "{text}");
    }

    let document = stdout_json(&bload(
        "stats --lengths AG --t-max 93 --world-size 2 --json",
    ));
    let policies = document["policies"].as_object().unwrap();
    for name in ["best_fit", "random_fill", "pad_to_max"] {
        // The reason in place of the figures: a reader tells the row by its one key.
        assert_eq!(policies[name], serde_json::json!({ "unavailable": why }));
    }
    for name in ["lanes", "truncate", "mix"] {
        assert!(policies[name]["blocks"].is_u64(), "{name}: {document}");
        assert!(policies[name].get("unavailable").is_none(), "{name}");
    }
    assert_eq!(policies["lanes"]["blocks"].to_string(), lanes[1]);
    // No packing policy planned, so no plan gave the packing bound.
    assert!(document["lower_bound_padding"].is_null(), "{document}");
    assert!(document["lanes_lower_bound_padding"].is_u64(), "{document}");

    // With --split every row has its figures.
    let split = stdout_json(&bload("stats --lengths AG --t-max 93 --split --json"));
    assert!(split["lower_bound_padding"].is_u64(), "{split}");
    for (name, row) in split["policies"].as_object().unwrap() {
        assert!(
            row["blocks"].is_u64() && row.get("unavailable").is_none(),
            "{name}"
        );
    }

    // One sequence too long is said in the singular.
    let file = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("one_long.lengths");
    std::fs::write(&file, "3\n9\n4\n").unwrap();
    let out = bload_args(&["stats", "--lengths", file.to_str().unwrap(), "--t-max", "5"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("best_fit       needs --split: 1 sequence is longer than t_max"),
        "{text}"
    );
}

#[test]
fn stats_plans_the_split_rows_where_lanes_have_too_few_sequences() {
    // Two sequences on 3 ranks: split, the packing policies have 11 pieces for 3 blocks a global
    // batch; lanes run whole sequences, 2 for 3 lanes. Its row says so, and the others plan.
    let file = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("two_long.lengths");
    std::fs::write(&file, "100\n3\n").unwrap();
    let path = file.to_str().unwrap();
    let line = [
        "stats",
        "--lengths",
        path,
        "--t-max",
        "10",
        "--world-size",
        "3",
        "--split",
    ];
    let out = bload_args(&line);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(table_row(&text, "best_fit")[1], "12", "{text}");
    let lanes = text
        .lines()
        .find(|line| line.starts_with("lanes "))
        .unwrap();
    assert!(
        lanes.contains("world_size = 3: expected at most 2"),
        "{text}"
    );
}

#[test]
fn plan_gives_every_rank_the_same_number_of_batches_and_all_steps_once() {
    let mut steps_seen = 0u64;
    let mut batch_counts = Vec::new();
    let mut hashes = Vec::new();
    for rank in ["0", "1", "2"] {
        let out = stdout_json(&bload(&format!("plan --lengths AG --t-max 94 --world-size 3 --blocks-per-batch 4 --rank {rank} --epoch 2 --json")));
        let batches = out["batches"].as_array().unwrap();
        batch_counts.push(batches.len());
        hashes.push(out["plan_hash"].as_str().unwrap().to_string());
        for batch in batches {
            let blocks = batch["blocks"].as_array().unwrap();
            assert_eq!(blocks.len(), 4);
            for block in blocks {
                for piece in block["pieces"].as_array().unwrap() {
                    steps_seen += piece["length"].as_u64().unwrap();
                    assert!(piece["continues"].is_boolean());
                    assert!(piece["block_offset"].is_u64() && piece["index"].is_u64());
                }
            }
        }
    }
    assert_eq!(steps_seen, 166_785);
    assert!(
        batch_counts.iter().all(|&n| n == batch_counts[0]),
        "{batch_counts:?}"
    );
    assert!(
        hashes.iter().all(|h| *h == hashes[0]),
        "ranks disagree on the plan: {hashes:?}"
    );
}

#[test]
fn plan_text_lists_pieces() {
    let out = bload("plan --lengths AG --t-max 94 --world-size 8 --rank 7");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("rank 7 of 8: 222 batches"),
        "{}",
        &text[..300]
    );
    assert!(text.lines().any(|line| line.starts_with("  #")));
}

#[test]
fn bad_input_is_a_clear_error_not_a_panic() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let junk = dir.join("junk.lengths");
    std::fs::write(&junk, "12\n7\n-3\n").unwrap();
    let out = bload_args(&[
        "stats",
        "--lengths",
        junk.to_str().unwrap(),
        "--t-max",
        "94",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("junk.lengths:3 = \"-3\" (negative)"), "{err}");
    assert!(!err.contains("panicked"));

    let out = bload("plan --lengths AG --t-max 94 --world-size 2 --rank 2");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains("--rank = \"2\": expected an integer from 0 to 1 (world_size - 1)"));

    // plan plans one policy: sequences too long for it are its error (stats gives the other
    // policies' rows instead, below).
    let out = bload("plan --lengths AG --t-max 50 --rank 0");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("t_max = 50") && err.contains("longest sequence (94 steps)"),
        "{err}"
    );

    let out = bload("stats --lengths AG --t-max ninety");
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains("--t-max = \"ninety\""));

    for line in [
        "stats --t-max 94",
        "frobnicate",
        "plan --lengths AG --t-max 94",
    ] {
        let out = bload(line);
        assert_eq!(out.status.code(), Some(2), "{line}");
        assert!(String::from_utf8(out.stderr).unwrap().contains("usage:"));
    }
}

#[test]
fn values_out_of_bounds_are_told_the_real_bounds() {
    for (line, message) in [
        (
            "stats --lengths AG --t-max 99999999",
            "--t-max = \"99999999\": expected an integer from 1 to 16777216",
        ),
        (
            "stats --lengths AG --t-max 94 --world-size 4294967296",
            "--world-size = \"4294967296\": expected an integer from 1 to 4294967295",
        ),
        (
            "stats --lengths AG --t-max 94 --seed -1",
            "--seed = \"-1\": expected an integer from 0 to 9223372036854775807",
        ),
        (
            // As C++ and Python take them (an int64): a plan printed here can be trained.
            "plan --lengths AG --t-max 94 --seed 9223372036854775808",
            "--seed = \"9223372036854775808\": expected an integer from 0 to 9223372036854775807",
        ),
        (
            "stats --lengths AG --t-max 94 --mix-to 0",
            "--mix-to = \"0\": expected an integer from 1 to 4294967295",
        ),
        (
            "plan --lengths AG --t-max 94 --rank 8 --world-size 8",
            "--rank = \"8\": expected an integer from 0 to 7 (world_size - 1)",
        ),
    ] {
        let out = bload(line);
        assert_eq!(out.status.code(), Some(1), "{line}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err, format!("bload: error: {message}\n"), "{line}");
    }
}

#[test]
fn more_blocks_per_global_batch_than_pieces_are_refused_at_once() {
    // 2^28 blocks per batch for 3 sequences: refused before a block is planned (it took minutes
    // and gigabytes when every block was planned first).
    let three = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("three.lengths");
    std::fs::write(&three, "3\n4\n5\n").unwrap();
    let out = bload_args(&[
        "plan",
        "--lengths",
        three.to_str().unwrap(),
        "--t-max",
        "7",
        "--world-size",
        "2",
        "--blocks-per-batch",
        "268435456",
        "--rank",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with(
            "bload: error: world_size * blocks_per_batch = 536870912 (2 x 268435456): \
             expected at most 3: each block of a global batch needs a piece"
        ),
        "{err}"
    );
}
