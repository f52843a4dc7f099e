//! `bload sweep`, run as a user would: a row per block size, the numbers `bload stats` gives for
//! each, block sizes that cannot be planned said so, and the chart.

use crate::cli_support;
use serde_json::Value;
use std::path::PathBuf;

use cli_support::{bload, bload_args, AG};

fn stdout(line: &str) -> String {
    let output = bload(line);
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{line}: {err}");
    assert!(err.is_empty(), "{line}: {err}");
    String::from_utf8(output.stdout).unwrap()
}

fn json(line: &str) -> Value {
    let text = stdout(line);
    assert_eq!(text.trim().lines().count(), 1, "one JSON object: {text}");
    serde_json::from_str(&text).unwrap()
}

/// The table's rows: the lines that start with a block size.
fn table_rows(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .map(|line| {
            line.split_whitespace()
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .filter(|words| words.first().is_some_and(|w| w.parse::<u32>().is_ok()))
        .collect()
}

fn rows(document: &Value) -> &Vec<Value> {
    document["rows"].as_array().unwrap()
}

fn temp_file(name: &str, text: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_row_per_point_with_both_ends_in_the_table_and_the_json() {
    for (range, points, expected) in [("94..300", "10", 10), ("100..300", "", 24), ("5..9", "", 5)]
    {
        let points = if points.is_empty() {
            String::new()
        } else {
            format!("--points {points}")
        };
        let line = format!("sweep --lengths AG --t-max {range} --split --world-size 2 {points}");
        let (first, last) = range.split_once("..").unwrap();
        let table = table_rows(&stdout(&line));
        assert_eq!(table.len(), expected, "{line}");
        assert_eq!(
            (table[0][0].as_str(), table[expected - 1][0].as_str()),
            (first, last)
        );
        let document = json(&format!("{line} --json"));
        let t_maxes: Vec<u64> = rows(&document)
            .iter()
            .map(|row| row["t_max"].as_u64().unwrap())
            .collect();
        let in_table: Vec<u64> = table.iter().map(|row| row[0].parse().unwrap()).collect();
        assert_eq!(t_maxes, in_table, "{line}");
        assert!(
            t_maxes.windows(2).all(|pair| pair[0] < pair[1]),
            "{t_maxes:?}"
        );
        assert_eq!(
            document["options"]["t_max"]["first"],
            first.parse::<u64>().unwrap()
        );
        assert_eq!(document["options"]["world_size"], 2);
        assert_eq!(document["options"]["split"], true);
    }
}

#[test]
fn best_fit_lies_between_the_bound_and_pad_to_max() {
    for line in [
        "sweep --lengths AG --t-max 94..400 --world-size 8 --json",
        "sweep --lengths AG --t-max 8..120 --split --world-size 3 --blocks-per-batch 2 --json",
    ] {
        for row in rows(&json(line)) {
            let blocks = |method: &str| row[method]["blocks"].as_u64().unwrap();
            let (bound, best_fit) = (blocks("lower_bound"), blocks("best_fit"));
            assert!(
                bound <= best_fit && best_fit <= blocks("pad_to_max"),
                "{row}"
            );
            for method in ["best_fit", "pad_to_max", "lanes", "lower_bound"] {
                let t_max = row["t_max"].as_u64().unwrap();
                let share = row[method]["padding_share"].as_f64().unwrap();
                let padding = row[method]["padding"].as_u64().unwrap() as f64;
                assert!((share - padding / (blocks(method) * t_max) as f64).abs() < 1e-12);
            }
            assert!(row["reason"].is_null());
        }
    }
}

#[test]
fn each_point_is_what_stats_reports_for_its_t_max() {
    for options in [
        "--world-size 2",
        "--split --world-size 3 --blocks-per-batch 4",
    ] {
        let sweep = json(&format!(
            "sweep --lengths AG --t-max 40..300 --points 4 {options} --json"
        ));
        for row in rows(&sweep).iter().filter(|row| row["reason"].is_null()) {
            let t_max = row["t_max"].as_u64().unwrap();
            let stats_line = format!("stats --lengths AG --t-max {t_max} {options}");
            let stats = json(&format!("{stats_line} --json"));
            for method in ["best_fit", "pad_to_max", "lanes"] {
                for key in ["blocks", "padding"] {
                    assert_eq!(row[method][key], stats["policies"][method][key], "{t_max}");
                }
            }
            assert_eq!(row["lower_bound"]["padding"], stats["lower_bound_padding"]);
            let table = stdout(&stats_line);
            let bound = table
                .lines()
                .find(|l| l.starts_with("lower bound"))
                .unwrap();
            let bound_blocks: Vec<&str> = bound.split_whitespace().collect();
            assert_eq!(row["lower_bound"]["blocks"].to_string(), bound_blocks[2]);
        }
    }
}

#[test]
fn a_small_file_gives_the_counts_by_hand() {
    let file = temp_file("sweep_small.lengths", "3\n5\n8\n");
    let line = format!("sweep --lengths {} --t-max 8..10 --json", file.display());
    let document = json(&line);
    let counts: Vec<[u64; 6]> = rows(&document)
        .iter()
        .map(|row| {
            let n = |method: &str, key: &str| row[method][key].as_u64().unwrap();
            [
                n("best_fit", "blocks"),
                n("best_fit", "padding"),
                n("pad_to_max", "blocks"),
                n("pad_to_max", "padding"),
                n("lower_bound", "blocks"),
                n("lower_bound", "padding"),
            ]
        })
        .collect();
    // 3 + 5 fill a block of 8 with the 8 alone beside them; alone, each pads to t_max.
    assert_eq!(
        counts,
        [[2, 0, 3, 8, 2, 0], [2, 2, 3, 11, 2, 2], [2, 4, 3, 14, 2, 4]]
    );
}

#[test]
fn block_sizes_below_the_longest_are_noted_not_fatal() {
    let table = stdout("sweep --lengths AG --t-max 30..300 --world-size 2");
    let rows_seen = table_rows(&table);
    let noted: Vec<&Vec<String>> = rows_seen.iter().filter(|r| r[1] == "not").collect();
    assert!(!noted.is_empty());
    for row in &rows_seen {
        let t_max: u32 = row[0].parse().unwrap();
        assert_eq!(row[1] == "not", t_max < 94, "{row:?}");
    }
    // The longest length is a row: the smallest block size that takes every sequence whole.
    assert!(rows_seen
        .iter()
        .any(|row| row[0] == "94" && row[1] != "not"));
    assert!(table.contains(
        "not planned: t_max = 30: expected at least the longest sequence (94 steps), or --split"
    ));

    let document = json("sweep --lengths AG --t-max 30..300 --world-size 2 --json");
    for row in rows(&document) {
        if row["t_max"].as_u64().unwrap() < 94 {
            assert!(
                row["best_fit"].is_null() && row["lower_bound"].is_null(),
                "{row}"
            );
            assert!(
                row["reason"].as_str().unwrap().contains("(94 steps)"),
                "{row}"
            );
        } else {
            assert!(row["best_fit"]["blocks"].is_u64() && row["reason"].is_null());
        }
    }
    // With --split every block size is planned.
    let split = json("sweep --lengths AG --t-max 30..300 --split --json");
    assert!(rows(&split).iter().all(|row| row["reason"].is_null()));
    assert_eq!(rows(&split).len(), 24);

    // No block size plannable: an error naming the flag and the longest sequence.
    let out = bload("sweep --lengths AG --t-max 30..60");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with("bload: error: --t-max = \"30..60\": expected a range that reaches the longest sequence (94 steps)"),
        "{err}"
    );
}

#[test]
fn malformed_ranges_are_refused_with_the_flag_named() {
    for value in [
        "10",
        "0..5",
        "9..3",
        "a..b",
        "7..7",
        "1..16777217",
        "3...9",
        "..9",
    ] {
        let out = bload_args(&["sweep", "--lengths", AG, "--t-max", value]);
        assert_eq!(out.status.code(), Some(1), "{value}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(
            err,
            format!(
                "bload: error: --t-max = {value:?}: expected a range A..B of block sizes, \
                 integers with 1 <= A < B <= 16777216\n"
            )
        );
    }
    for (line, message) in [
        (
            "sweep --lengths AG --t-max 94..99 --points 1",
            "--points = \"1\"",
        ),
        (
            "sweep --lengths AG --t-max 94..99 --points x",
            "--points = \"x\"",
        ),
    ] {
        let out = bload(line);
        assert_eq!(out.status.code(), Some(1), "{line}");
        assert!(
            String::from_utf8(out.stderr).unwrap().contains(message),
            "{line}"
        );
    }
    // A missing range, and flags a sweep has no use for, are malformed command lines.
    for line in [
        "sweep --lengths AG",
        "sweep --lengths AG --t-max 94..99 --seed 3",
        "sweep --lengths AG --t-max 94..99 --plot",
        "stats --lengths AG --t-max 94 --points 3",
    ] {
        let out = bload(line);
        assert_eq!(out.status.code(), Some(2), "{line}");
        assert!(
            String::from_utf8(out.stderr).unwrap().contains("usage:"),
            "{line}"
        );
    }
}

/// Checks that `svg` nests its tags: every one opened is closed, in order.
fn assert_tags_nest(svg: &str) {
    let mut open = Vec::new();
    for tag in svg.split('<').skip(1) {
        let tag = &tag[..tag.find('>').expect("a tag ends")];
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(open.pop(), Some(name), "</{name}> closes another tag");
        } else if !tag.ends_with('/') {
            open.push(tag.split_whitespace().next().unwrap());
        }
    }
    assert!(open.is_empty(), "left open: {open:?}");
}

#[test]
fn a_plot_onto_a_directory_is_refused_and_writes_nothing() {
    // Written whole or not at all, as every output: a directory (or a FIFO, a device) there is
    // named before anything is written.
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("sweep-plot-dir");
    std::fs::create_dir_all(&dir).unwrap();
    let out = bload(&format!(
        "sweep --lengths AG --t-max 30..300 --plot {}",
        dir.display()
    ));
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("--plot = ") && stderr.contains("(a directory): expected a regular file"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
}

#[test]
fn plot_writes_an_svg_chart() {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("sweep.svg");
    let _ = std::fs::remove_file(&path);
    let line = format!(
        "sweep --lengths AG --t-max 30..300 --world-size 2 --plot {}",
        path.display()
    );
    let table = stdout(&line);
    assert!(table.contains("best_fit"), "the table is printed too");
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(svg.ends_with("</svg>\n"));
    assert_tags_nest(&svg);
    assert_eq!(svg.matches("<path ").count(), 4, "a line per method");
    for label in [
        ">best_fit<",
        ">pad_to_max<",
        ">lanes<",
        ">lower bound<",
        "action_genome_like.lengths",
    ] {
        assert!(svg.contains(label), "{label}");
    }
    for tick in [
        ">0%<",
        ">100%<",
        ">100<",
        ">300<",
        "t_max (steps per block)",
    ] {
        assert!(svg.contains(tick), "{tick}");
    }

    // A long path is shortened to its file name in the title.
    let deep = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("a rather long folder name/for lengths files");
    std::fs::create_dir_all(&deep).unwrap();
    let small = deep.join("small & short.lengths");
    std::fs::write(&small, "3\n5\n8\n").unwrap();
    let out = bload_args(&[
        "sweep",
        "--lengths",
        small.to_str().unwrap(),
        "--t-max",
        "8..10",
        "--plot",
        path.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(
        svg.contains(">Padding by block size: .../small &amp; short.lengths<"),
        "{svg}"
    );
    assert_tags_nest(&svg);

    // A path that cannot be written is an error naming it.
    let bad = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("no such dir/sweep.svg");
    let out = bload_args(&[
        "sweep",
        "--lengths",
        AG,
        "--t-max",
        "94..99",
        "--plot",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with(&format!(
            "bload: error: --plot = {} (no such directory: {}): expected a path in an existing \
             directory",
            bad.display(),
            bad.parent().unwrap().display()
        )),
        "{err}"
    );
}

#[test]
fn a_long_sweep_shows_no_progress_where_stderr_is_not_a_terminal() {
    // Hundreds of plans of the speech-shaped set: long enough to show progress on a terminal,
    // but stderr is a pipe here, where nothing but errors may appear (what a terminal gets is
    // tested in src/cli/progress.rs).
    let line = "sweep --lengths examples/data/speech_like.lengths --t-max 64..4096 --points 100 \
                --split";
    let table = stdout(line);
    assert_eq!(table_rows(&table).len(), 100);
    assert!(!table.contains('\r') && !table.contains('\x1b'), "{table}");
}
