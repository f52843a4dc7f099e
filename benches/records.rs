//! `cargo bench --bench records`: bload beside the published packing records and the packers
//! users pick, in one run (issue 38). Graphcore's Wikipedia histogram (16.3M sequences, t_max
//! 512) with no cap, at most 12 sequences a block (LPFHP's published 99.8129%), at most 3
//! (NNLSHP's published 99.75%), at most 4 and at most 2; Graphcore's SQuAD histogram (t_max
//! 384); 1M and 10M lognormal lengths (median 200, t_max 2048, as `benches/plan.rs`). Beside
//! bload: SPFHP written here from
//! the paper (`common/spfhp.rs`), on the histogram alone, then giving every sequence its pack,
//! then doing so with the randomness of bload's plans (each length's sequences and the packs'
//! order shuffled, the same work as bload's time includes), and seqpacker's OBFD (which has no
//! cap, so it runs in the rows without one).
//!
//! Columns: blocks, efficiency (real steps over blocks x t_max), the most sequences in a block,
//! and the median time of 5 rounds, the packers of a row alternating within each round. bload's
//! time is `Planner::new` and `plan(0)`: every sequence placed, shuffled and dealt.
//! Each row also times a later epoch of one planner (bload keeps its packing, as runs of equal
//! blocks) beside SPFHP's assignment and shuffles from strategies it made once.
//! `BLOAD_BENCH_ONLY=squad` (or `wikipedia`, `lognormal`) runs those rows alone.

use bload::{EpochPlan, Options, Planner};
use seqpacker::{PackStrategy, Packer};
use std::path::Path;
use std::time::Instant;

mod common;
use common::lognormal_lengths;
#[path = "common/timing.rs"]
mod timing;
use timing::timing_of;
#[path = "common/spfhp.rs"]
mod spfhp;

const ROUNDS: usize = 5;

/// A `LENGTH COUNT` histogram (after `#` comment lines): the count of each length 0..=t_max.
fn read_histogram(path: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|err| panic!("{path:?}: {err}"));
    let mut counts = Vec::new();
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        let mut words = line.split_whitespace().map(|word| word.parse::<u64>());
        let (Some(Ok(length)), Some(Ok(count)), None) = (words.next(), words.next(), words.next())
        else {
            panic!("{path:?}: {line:?} is not LENGTH COUNT");
        };
        if counts.len() <= length as usize {
            counts.resize(length as usize + 1, 0);
        }
        counts[length as usize] += count;
    }
    counts
}

/// Every sequence of the histogram, the lengths interleaved (as a data set's are) by a fixed
/// stride through them sorted.
fn lengths_of(counts: &[u64]) -> Vec<u32> {
    let mut sorted = Vec::new();
    for (length, &count) in (0u32..).zip(counts) {
        sorted.extend(std::iter::repeat_n(length, count as usize));
    }
    let n = sorted.len();
    let stride = (1..)
        .map(|k| n / 2 + k)
        .find(|&s| gcd(s, n) == 1)
        .unwrap_or(1);
    (0..n).map(|i| sorted[i * stride % n]).collect()
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn counts_of(lengths: &[u32], t_max: u32) -> Vec<u64> {
    let mut counts = vec![0u64; t_max as usize + 1];
    for &length in lengths {
        counts[length as usize] += 1;
    }
    counts
}

/// What one packer made, and its times over the rounds.
struct Outcome {
    blocks: u64,
    deepest: usize,
    seconds: Vec<f64>,
}

/// A packer of a row: its name and a run that returns (blocks, most sequences in a block).
type Run<'a> = (String, Box<dyn FnMut() -> (u64, usize) + 'a>);

/// bload's options for a row: `t_max` and the cap, if any.
fn options_of(t_max: u32, cap: Option<u32>) -> Options {
    let mut options = Options::new(t_max);
    options.max_pieces = cap;
    options
}

/// A bload plan's (blocks, most sequences in a block).
fn plan_outcome(plan: &EpochPlan) -> (u64, usize) {
    let deepest = plan.blocks().map(|block| block.len()).max().unwrap_or(0);
    (plan.num_blocks() as u64, deepest)
}

/// SPFHP's shuffled assignment of every sequence, checked whole: (blocks, most in a block).
fn spans_outcome(sequences: usize, spans: &[(u64, u64)], lengths: &[u32]) -> (u64, usize) {
    assert_eq!(sequences, lengths.len());
    let deepest = spans.iter().map(|&(start, end)| end - start).max();
    (spans.len() as u64, deepest.unwrap_or(0) as usize)
}

fn bload_run<'a>(lengths: &'a [u32], t_max: u32, cap: Option<u32>) -> Run<'a> {
    let options = options_of(t_max, cap);
    let name = match cap {
        Some(cap) => format!("bload best_fit, at most {cap}"),
        None => "bload best_fit".to_string(),
    };
    let run = move || {
        let input = lengths.to_vec();
        let start = Instant::now();
        let plan = Planner::new(input, options.clone())
            .and_then(|planner| planner.plan(0))
            .expect("a valid bench plan");
        TIMED.with(|timed| timed.set(start.elapsed().as_secs_f64()));
        plan_outcome(&plan)
    };
    (name, Box::new(run))
}

thread_local! {
    /// The time of the last run's own work (without copying its input or measuring its output).
    static TIMED: std::cell::Cell<f64> = const { std::cell::Cell::new(0.0) };
}

fn spfhp_runs<'a>(lengths: &'a [u32], counts: &'a [u64], t_max: u32, cap: usize) -> [Run<'a>; 3] {
    let shown = if cap >= t_max as usize {
        String::new()
    } else {
        format!(", at most {cap}")
    };
    let histogram = move || {
        let start = Instant::now();
        let strategies = spfhp::spfhp(counts, t_max, cap);
        TIMED.with(|timed| timed.set(start.elapsed().as_secs_f64()));
        let blocks = strategies.iter().map(|s| s.count).sum();
        let deepest = strategies
            .iter()
            .map(|s| s.lengths.len())
            .max()
            .unwrap_or(0);
        (blocks, deepest)
    };
    let assigned = move || {
        let start = Instant::now();
        let strategies = spfhp::spfhp(counts, t_max, cap);
        let assignment = spfhp::assign(&strategies, lengths, t_max);
        TIMED.with(|timed| timed.set(start.elapsed().as_secs_f64()));
        assert_eq!(assignment.sequences.len(), lengths.len());
        let deepest = strategies
            .iter()
            .map(|s| s.lengths.len())
            .max()
            .unwrap_or(0);
        (assignment.ends.len() as u64, deepest)
    };
    let shuffled = move || {
        let start = Instant::now();
        let strategies = spfhp::spfhp(counts, t_max, cap);
        let (assignment, spans) = spfhp::assign_shuffled(&strategies, lengths, t_max, 0);
        TIMED.with(|timed| timed.set(start.elapsed().as_secs_f64()));
        spans_outcome(assignment.sequences.len(), &spans, lengths)
    };
    [
        (format!("SPFHP{shown}, histogram"), Box::new(histogram)),
        (format!("SPFHP{shown}, every sequence"), Box::new(assigned)),
        (
            format!("SPFHP{shown}, every sequence, shuffled as bload's plans"),
            Box::new(shuffled),
        ),
    ]
}

/// Each later epoch (1, 2, ...) of one planner, after its first: what a training run pays each
/// epoch once bload keeps its packing (as runs of equal blocks), beside SPFHP giving every
/// sequence its pack and shuffling as bload's plans do, from the packing strategies it made once.
fn later_epoch_runs<'a>(
    lengths: &'a [u32],
    counts: &'a [u64],
    t_max: u32,
    cap: Option<u32>,
) -> [Run<'a>; 2] {
    let options = options_of(t_max, cap);
    let shown = cap.map_or(String::new(), |cap| format!(", at most {cap}"));
    let mut planner: Option<Planner> = None;
    let mut epoch = 0;
    let bload = move || {
        let planner = planner.get_or_insert_with(|| {
            let planner = Planner::new(lengths.to_vec(), options.clone()).expect("a bench plan");
            planner.plan(0).expect("a bench plan");
            planner
        });
        epoch += 1;
        let start = Instant::now();
        let plan = planner.plan(epoch).expect("a valid bench plan");
        TIMED.with(|timed| timed.set(start.elapsed().as_secs_f64()));
        plan_outcome(&plan)
    };
    let spfhp_cap = cap.map_or(t_max as usize, |cap| cap as usize);
    let strategies = spfhp::spfhp(counts, t_max, spfhp_cap);
    let mut seed = 0;
    let spfhp = move || {
        seed += 1;
        let start = Instant::now();
        let (assignment, spans) = spfhp::assign_shuffled(&strategies, lengths, t_max, seed);
        TIMED.with(|timed| timed.set(start.elapsed().as_secs_f64()));
        spans_outcome(assignment.sequences.len(), &spans, lengths)
    };
    [
        (
            format!("bload best_fit{shown}, a later epoch"),
            Box::new(bload),
        ),
        (
            format!("SPFHP{shown}, a later epoch (strategies kept), shuffled as bload's plans"),
            Box::new(spfhp),
        ),
    ]
}

fn seqpacker_run<'a>(lengths: &'a [u32], t_max: u32) -> Run<'a> {
    let run = move || {
        let input: Vec<usize> = lengths.iter().map(|&l| l as usize).collect();
        let packer =
            Packer::new(t_max as usize).with_strategy(PackStrategy::OptimizedBestFitDecreasing);
        let start = Instant::now();
        let result = packer.pack_lengths(&input).expect("packs");
        TIMED.with(|timed| timed.set(start.elapsed().as_secs_f64()));
        let deepest = result
            .packs
            .iter()
            .map(|pack| pack.len())
            .max()
            .unwrap_or(0);
        (result.packs.len() as u64, deepest)
    };
    ("seqpacker OBFD".to_string(), Box::new(run))
}

/// Runs the packers of a row in turn, `ROUNDS` times, and prints a line each.
fn row(title: &str, lengths: &[u32], t_max: u32, mut runs: Vec<Run>, published: &[(&str, f64)]) {
    let steps: u64 = lengths.iter().map(|&l| u64::from(l)).sum();
    let mut outcomes: Vec<Outcome> = runs
        .iter()
        .map(|_| Outcome {
            blocks: 0,
            deepest: 0,
            seconds: Vec::new(),
        })
        .collect();
    for _ in 0..ROUNDS {
        for ((_, run), outcome) in runs.iter_mut().zip(&mut outcomes) {
            let (blocks, deepest) = run();
            outcome.blocks = blocks;
            outcome.deepest = deepest;
            outcome.seconds.push(TIMED.with(|timed| timed.get()));
        }
    }
    println!(
        "\n{title}: {} sequences, {steps} steps, t_max {t_max}",
        lengths.len()
    );
    println!(
        "| packer | blocks | efficiency | most a block | median s | fastest s |\n|---|---|---|---|---|---|"
    );
    for ((name, _), outcome) in runs.iter().zip(outcomes) {
        let efficiency = steps as f64 / (outcome.blocks * u64::from(t_max)) as f64;
        let timing = timing_of(outcome.seconds);
        println!(
            "| {name} | {} | {:.4}% | {} | {:.4} | {:.4} |",
            outcome.blocks,
            efficiency * 100.0,
            outcome.deepest,
            timing.median,
            timing.fastest,
        );
    }
    for (name, efficiency) in published {
        println!("| {name} (published) | | {efficiency:.4}% | | | |");
    }
}

fn wanted(name: &str) -> bool {
    std::env::var("BLOAD_BENCH_ONLY").map_or(true, |only| only == name)
}

fn main() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data");
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at the start: {}", load.trim());
    if wanted("wikipedia") {
        let counts = read_histogram(&data.join("graphcore_wikipedia_512.hist"));
        let lengths = lengths_of(&counts);
        for (cap, published) in [
            (None, vec![]),
            (Some(12), vec![("LPFHP, at most 12", 99.8129)]),
            (Some(3), vec![("NNLSHP, at most 3", 99.75)]),
            (Some(4), vec![]),
            (Some(2), vec![]),
        ] {
            let mut runs = vec![bload_run(&lengths, 512, cap)];
            runs.extend(spfhp_runs(
                &lengths,
                &counts,
                512,
                cap.map_or(512, |c| c as usize),
            ));
            runs.extend(later_epoch_runs(&lengths, &counts, 512, cap));
            if cap.is_none() {
                runs.push(seqpacker_run(&lengths, 512));
            }
            row("Graphcore Wikipedia", &lengths, 512, runs, &published);
        }
    }
    if wanted("squad") {
        let counts = read_histogram(&data.join("graphcore_squad_384.hist"));
        let lengths = lengths_of(&counts);
        let mut runs = vec![bload_run(&lengths, 384, None)];
        runs.extend(spfhp_runs(&lengths, &counts, 384, 384));
        runs.extend(later_epoch_runs(&lengths, &counts, 384, None));
        runs.push(seqpacker_run(&lengths, 384));
        row("Graphcore SQuAD", &lengths, 384, runs, &[]);
    }
    if wanted("lognormal") {
        for size in [1_000_000, 10_000_000] {
            let lengths = lognormal_lengths(size, 200.0, 2048);
            let counts = counts_of(&lengths, 2048);
            let mut runs = vec![bload_run(&lengths, 2048, None)];
            runs.extend(spfhp_runs(&lengths, &counts, 2048, 2048));
            runs.extend(later_epoch_runs(&lengths, &counts, 2048, None));
            runs.push(seqpacker_run(&lengths, 2048));
            row(&format!("lognormal {size}"), &lengths, 2048, runs, &[]);
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("\nload average at the end: {}", load.trim());
}
