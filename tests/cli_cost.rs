//! `--cost`: dealing blocks to ranks by what they cost, as `stats` and `plan` take it.

use crate::cli_support;

use cli_support::{bload, bload_args, json};

fn imbalance(document: &serde_json::Value, policy: &str) -> (f64, f64) {
    let imbalance = &document["policies"][policy]["rank_cost_imbalance"];
    (
        imbalance["mean"].as_f64().unwrap(),
        imbalance["worst"].as_f64().unwrap(),
    )
}

#[test]
fn stats_reports_the_imbalance_in_the_cost_asked_and_dealing_by_it_lowers_it() {
    // The Action-Genome-shaped set split at 40 steps, 4 ranks of 1 block: blocks of a few long
    // pieces and blocks of many short ones cost very unlike amounts of attention.
    let line = "stats --lengths AG --t-max 40 --split --world-size 4 --json";
    let by_steps = json(line);
    let balanced = json(&format!("{line} --cost attention:1"));
    let (steps_mean, steps_worst) = imbalance(&by_steps, "best_fit");
    let (mean, worst) = imbalance(&balanced, "best_fit");
    assert!(steps_mean >= 1.0 && steps_worst >= steps_mean);
    assert!((1.0..=worst).contains(&mean), "{balanced}");
    // The same blocks and padding, only dealt otherwise.
    for field in ["blocks", "padding"] {
        assert_eq!(
            balanced["policies"]["best_fit"][field],
            by_steps["policies"]["best_fit"][field]
        );
    }
    // Baselines are not planned: no imbalance; lanes rows are (by steps), measured in the cost.
    assert!(balanced["policies"]["truncate"]
        .get("rank_cost_imbalance")
        .is_none());
    assert!(imbalance(&balanced, "lanes").0 >= 1.0);
    // A steps plan measured in attention is less even than the plan dealt by attention.
    let text = bload("stats --lengths AG --t-max 40 --split --world-size 4 --cost attention:1");
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("cost attention:1"), "{text}");
    let best_fit = text.lines().find(|l| l.starts_with("best_fit")).unwrap();
    assert!(
        best_fit.ends_with(&format!("{mean:.2} / {worst:.2}")),
        "{text}"
    );
}

#[test]
fn plan_deals_by_cost_and_every_rank_keeps_its_batch_count() {
    let line = "plan --lengths AG --t-max 40 --split --world-size 4 --json --rank";
    for rank in [0, 3] {
        let steps = json(&format!("{line} {rank}"));
        let cost = json(&format!("{line} {rank} --cost attention:64"));
        assert_eq!(
            steps["batches"].as_array().unwrap().len(),
            cost["batches"].as_array().unwrap().len()
        );
    }
}

#[test]
fn bad_costs_name_the_flag_the_value_and_what_is_expected() {
    for bad in [
        "flops",
        "attention",
        "attention:-1",
        "attention:4294967297",
        "Steps",
    ] {
        let out = bload_args(&[
            "stats",
            "--lengths",
            cli_support::AG,
            "--t-max",
            "94",
            "--cost",
            bad,
        ]);
        assert_eq!(out.status.code(), Some(1), "{bad}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(
            err.contains(&format!(
                "--cost = {bad:?}: expected \"steps\" or \"attention:A\""
            )),
            "{err}"
        );
        assert!(!err.contains("panicked"));
    }
    let out = bload("plan --lengths AG --t-max 94 --rank 0 --cost");
    assert_eq!(out.status.code(), Some(2));
    // Lanes keep their rows all epoch: dealing them by cost is refused, naming the cost.
    let out = bload("plan --lengths AG --t-max 94 --rank 0 --policy lanes --cost attention:1");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("cost = \"attention:1\": expected \"steps\" with the lanes policy"),
        "{err}"
    );
}
