//! `bload stats/plan --source PATH:WEIGHT`: a mixture of lengths files, run as a user would.

use crate::cli_support;

use cli_support::{bload, bload_args, AG};
use std::process::Output;

/// Three short sequences (12, 7, 3 steps): a source far below any share, repeated.
const SMALL: &str = "tests/data/lengths/crlf_comments.lengths";

fn json_of(output: &Output) -> serde_json::Value {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    serde_json::from_slice(&output.stdout).unwrap()
}

fn sources(weights: [&str; 2]) -> Vec<String> {
    let ag = format!("{AG}:{}", weights[0]);
    let text = format!("{SMALL}:{}", weights[1]);
    ["--source", &ag, "--source", &text]
        .map(String::from)
        .to_vec()
}

fn run(command: &str, weights: [&str; 2], rest: &[&str]) -> Output {
    let mut words = vec![command.to_string()];
    words.extend(sources(weights));
    words.extend(rest.iter().map(|word| word.to_string()));
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    bload_args(&words)
}

#[test]
fn stats_and_plan_report_each_source_at_its_share() {
    let stats = json_of(&run("stats", ["0.7", "0.3"], &["--t-max", "94", "--json"]));
    let sources = stats["sources"].as_array().unwrap();
    assert_eq!(sources.len(), 2);
    assert_eq!(sources[0]["name"], AG);
    for (source, weight) in sources.iter().zip([0.7, 0.3]) {
        assert!((source["weight_share"].as_f64().unwrap() - weight).abs() < 1e-12);
        // Within one sequence: far closer than a percent on thousands of sequences.
        assert!(
            (source["share"].as_f64().unwrap() - weight).abs() < 0.01,
            "{source}"
        );
    }
    let plan = json_of(&run(
        "plan",
        ["0.7", "0.3"],
        &[
            "--t-max",
            "94",
            "--rank",
            "0",
            "--world-size",
            "8",
            "--json",
        ],
    ));
    assert_eq!(plan["sources"], stats["sources"]);
    // The plan holds the steps the sources gave.
    let steps: u64 = sources.iter().map(|s| s["steps"].as_u64().unwrap()).sum();
    assert_eq!(plan["stats"]["steps"], steps);
}

#[test]
fn bad_sources_are_named() {
    for (weights, message) in [
        (
            ["0.7", "0"],
            "--source[1].weight = 0: expected a finite number above 0",
        ),
        (["nan", "1"], "--source[0].weight = NaN"),
        (["x", "1"], "--source = \""),
    ] {
        let output = run("stats", weights, &["--t-max", "94"]);
        assert_eq!(output.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(message), "{stderr}");
    }
    let output = bload_args(&["plan", "--source", AG, "--t-max", "94", "--rank", "0"]);
    assert!(String::from_utf8_lossy(&output.stderr).contains("expected PATH:WEIGHT"));
    let output = bload("stats --source x:1 --lengths AG --t-max 94");
    assert_eq!(output.status.code(), Some(2));
}
