//! `cargo bench --locked --bench cost` (also `make bench`): ranks dealt by steps against ranks
//! dealt by attention cost (issue 23, docs/cost_balance.md).
//!
//! Two length sets, split at `t_max` 4,096 and 8,192, on 8 ranks of 1 and of 4 blocks: the bundled
//! text-shaped set (`examples/data/text_like.lengths`) and 200,000 LLM-like documents (lognormal,
//! median 600 tokens, sigma 1.4, within 1..=131,072; a long tail of documents longer than a
//! block). For each, the plan dealt by `steps` (bload's default, the reference) is measured in
//! `attention:0`, `attention:1` and `attention:4096`, and the plans dealt by `attention:1` and
//! `attention:4096` in their own cost: the imbalance (per global batch, the costliest rank over
//! the mean rank; mean and worst over the global batches) and the padding. Planning time: the
//! plan of an epoch by `steps` and by `attention:1`, rounds alternating the two, median of each
//! and their ratio (`attention:1` over `steps`; the stats' imbalance, measured when read, is not
//! timed).
//! Last, what reading a plan's stats costs, which measure the imbalance the first time (a pass
//! over every piece; a plan only served never pays it): 10M lognormal lengths (median 200,
//! within 1..=2048) at `t_max` 2,048, the plan of an epoch against measuring its imbalance,
//! medians of the rounds.
//! `BLOAD_BENCH_ROUNDS` sets the rounds (default 5); `BLOAD_BENCH_ONLY=overhead` runs the last
//! table alone.

use bload::{read_lengths, Cost, EpochPlan, Options, Oversize, Planner};
use std::path::Path;
use std::time::Instant;

mod common;
use common::lognormal_lengths;
#[path = "common/timing.rs"]
#[allow(dead_code)] // this bench reads the median alone
mod timing;
use timing::timing_of;

/// LLM-like document lengths: lognormal, drawn from a fixed xorshift stream (an input of the
/// benchmark, not a plan's randomness).
fn documents(count: usize) -> Vec<u32> {
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut uniform = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    let (median, sigma, longest) = (600.0f64, 1.4, 131_072.0);
    let mut lengths = Vec::with_capacity(count);
    while lengths.len() < count {
        let normal =
            (-2.0 * uniform().ln()).sqrt() * (2.0 * std::f64::consts::PI * uniform()).cos();
        let length = (median.ln() + sigma * normal).exp().round();
        if (1.0..=longest).contains(&length) {
            lengths.push(length as u32);
        }
    }
    lengths
}

fn planner(lengths: &[u32], t_max: u32, blocks_per_batch: u32, cost: Cost) -> Planner {
    let mut options = Options::new(t_max);
    options.world_size = 8;
    options.blocks_per_batch = blocks_per_batch;
    options.oversize = Oversize::Split;
    options.cost = cost;
    Planner::new(lengths.to_vec(), options).expect("the benchmark's lengths plan")
}

fn row(set: &str, t_max: u32, blocks: u32, dealt: Cost, measured: Cost, plan: &EpochPlan) {
    let imbalance = plan.rank_cost_imbalance(measured);
    println!(
        "{set:<12} {t_max:>6} {:>5} {:<16} {:<16} {:>7.3} {:>7.3} {:>11}",
        format!("8x{blocks}"),
        dealt.to_string(),
        measured.to_string(),
        imbalance.mean,
        imbalance.worst,
        plan.stats().padding
    );
}

fn main() {
    let rounds: usize = std::env::var("BLOAD_BENCH_ROUNDS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(5)
        .max(1);
    if std::env::var("BLOAD_BENCH_ONLY").as_deref() != Ok("overhead") {
        balance_tables(rounds);
    }
    overhead(rounds);
}

fn overhead(rounds: usize) {
    let lengths = lognormal_lengths(10_000_000, 200.0, 2048);
    let mut options = Options::new(2048);
    options.world_size = 8;
    let planner = Planner::new(lengths, options).unwrap();
    let (mut plans, mut measures) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let start = Instant::now();
        let plan = planner.plan(round as u64).unwrap();
        plans.push(start.elapsed().as_secs_f64());
        let start = Instant::now();
        std::hint::black_box(plan.rank_cost_imbalance(Cost::Steps));
        measures.push(start.elapsed().as_secs_f64());
    }
    let (plan, measure) = (timing_of(plans).median, timing_of(measures).median);
    println!();
    println!("measuring the imbalance of a steps plan, 10M lognormal lengths, t_max 2048, 8 ranks");
    println!(
        "plan(epoch) {plan:.4} s, measuring its imbalance (at the first stats()) {measure:.4} s: {:.2}x the plan",
        measure / plan
    );
}

fn balance_tables(rounds: usize) {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data/text_like.lengths");
    let sets = [
        (
            "text_like",
            read_lengths(&data).expect("the bundled text set"),
        ),
        ("documents", documents(200_000)),
    ];
    let steps = Cost::Steps;
    let (one, big) = (
        Cost::Attention { linear: 1 },
        Cost::Attention { linear: 4096 },
    );
    println!("ranks dealt by cost (8 ranks, --split); imbalance: costliest rank / mean rank per global batch");
    println!(
        "{:<12} {:>6} {:>5} {:<16} {:<16} {:>7} {:>7} {:>11}",
        "set", "t_max", "ranks", "dealt by", "measured in", "mean", "worst", "padding"
    );
    let mut timings = Vec::new();
    for (set, lengths) in &sets {
        for t_max in [4096, 8192] {
            for blocks in [1, 4] {
                let by_steps = planner(lengths, t_max, blocks, steps);
                let by_one = planner(lengths, t_max, blocks, one);
                let by_big = planner(lengths, t_max, blocks, big);
                let plan = by_steps.plan(0).unwrap();
                for measured in [Cost::Attention { linear: 0 }, one, big] {
                    row(set, t_max, blocks, steps, measured, &plan);
                }
                row(set, t_max, blocks, one, one, &by_one.plan(0).unwrap());
                row(set, t_max, blocks, big, big, &by_big.plan(0).unwrap());
                let (mut reference, mut balanced) = (Vec::new(), Vec::new());
                for round in 0..rounds {
                    // Alternating which goes first, so that neither always runs on a warm cache.
                    let order: [(&Planner, &mut Vec<f64>); 2] = if round % 2 == 0 {
                        [(&by_steps, &mut reference), (&by_one, &mut balanced)]
                    } else {
                        [(&by_one, &mut balanced), (&by_steps, &mut reference)]
                    };
                    for (planner, times) in order {
                        let start = Instant::now();
                        let plan = planner.plan(round as u64).unwrap();
                        times.push(start.elapsed().as_secs_f64());
                        std::hint::black_box(plan);
                    }
                }
                timings.push((
                    *set,
                    t_max,
                    blocks,
                    timing_of(reference).median,
                    timing_of(balanced).median,
                ));
            }
        }
    }
    println!();
    println!("planning time of an epoch, median of {rounds} rounds alternating the two");
    println!(
        "{:<12} {:>6} {:>5} {:>10} {:>14} {:>7}",
        "set", "t_max", "ranks", "steps_s", "attention:1_s", "ratio"
    );
    for (set, t_max, blocks, reference, balanced) in timings {
        println!(
            "{set:<12} {t_max:>6} {:>5} {reference:>10.4} {balanced:>14.4} {:>7.2}",
            format!("8x{blocks}"),
            balanced / reference
        );
    }
}
