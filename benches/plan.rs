//! `cargo bench`: plans 1M and 10M lognormal lengths (t_max 2048), 1M longer ones in blocks of
//! 65,536 steps, and the bundled length sets with
//! bload's `best_fit`, and packs the same lengths with `seqpacker`'s fastest best-fit (OBFD), in
//! the same run. Prints time, sequences per second and nanoseconds per sequence, padding, and
//! peak heap bytes per sequence. Then epochs of any size (issue 13): 1M, 10M and 100M lognormal
//! lengths of mean about 1,000 steps in blocks of 4,096 (10^11 steps at 100M), bload only.
//! Last, small hard sets (issue 13): a few hundred lengths from `t_max / 13` to `t_max`
//! (`tests/common/hard_sets.rs`), blocks against the lower bound, and the time to plan each.
//! Single-threaded. Set `BLOAD_BENCH_SIZES=1000000` to change the synthetic sizes of the first
//! rows, `BLOAD_BENCH_SCALE_SIZES` those of the scale rows; `BLOAD_BENCH_ONLY=hard_sets` runs the
//! hard sets alone. `BLOAD_BENCH_ONLY=ingest` times `Planner::new` alone on the lengths file
//! `BLOAD_BENCH_LENGTHS` (t_max `BLOAD_BENCH_T_MAX`, default 2048): the baseline that
//! `benches/ingest.py` compares Python's ingestion of the same lengths with.
//! `BLOAD_BENCH_ONLY=lanes` runs alone the rows of `lanes` beside `best_fit` (issue 26): 5M and
//! 50M lognormal lengths in blocks of 4,096 on 8 ranks x 4 rows, rounds alternating the two
//! policies, with the ratio of their medians; `BLOAD_BENCH_LANES_SIZES=5000000` leaves out 50M.
//! `BLOAD_BENCH_CLOCK=cpu` times every row in the planning thread's CPU time instead of the wall
//! clock (for a machine shared with other work).

use bload::{read_lengths, Options, Oversize, Planner, Policy};
use seqpacker::{PackStrategy, Packer};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;
use std::time::Instant;

mod common;
use common::lognormal_lengths;

#[path = "../tests/common/hard_sets.rs"]
mod hard_sets;

#[path = "common/timing.rs"]
mod timing;
use timing::{timing_of, Timing};

#[path = "common/counting.rs"]
mod counting;
use counting::{CountingAllocator, LIVE, PEAK};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Runs `work` `runs` times: its last result, the median and fastest wall time, and the peak
/// heap bytes above what was live when a run started.
fn measure<T>(runs: usize, mut work: impl FnMut() -> T) -> (T, Timing, usize) {
    let mut seconds = Vec::new();
    let mut peak = 0;
    let mut out = None;
    for _ in 0..runs {
        drop(out.take());
        let base = LIVE.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        let start = clock();
        out = Some(work());
        seconds.push(clock() - start);
        peak = peak.max(PEAK.load(Ordering::Relaxed) - base);
    }
    (out.expect("runs > 0"), timing_of(seconds), peak)
}

/// Seconds on the bench's clock: the wall clock, or with `BLOAD_BENCH_CLOCK=cpu` the CPU time of
/// this thread, which other work on a shared machine inflates far less (time spent waiting for
/// a core is not counted; sharing the caches and memory still is).
fn clock() -> f64 {
    static CPU: OnceLock<bool> = OnceLock::new();
    static START: OnceLock<Instant> = OnceLock::new();
    if *CPU.get_or_init(|| std::env::var("BLOAD_BENCH_CLOCK").is_ok_and(|clock| clock == "cpu")) {
        let mut time = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `time` is a timespec the call writes, and nothing else.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time) };
        return time.tv_sec as f64 + time.tv_nsec as f64 * 1e-9;
    }
    START.get_or_init(Instant::now).elapsed().as_secs_f64()
}

/// `measure` of `work` on a fresh copy of `lengths` each run, the copies made (and their pages
/// touched) before the clock: the planner takes its lengths by value.
fn measure_on_copies<T>(
    lengths: &[u32],
    runs: usize,
    mut work: impl FnMut(Vec<u32>) -> T,
) -> (T, Timing, usize) {
    let mut inputs: Vec<Vec<u32>> = (0..runs).map(|_| lengths.to_vec()).collect();
    measure(runs, || work(inputs.pop().expect("one input per run")))
}

const RUNS: usize = 5;
/// The constructor alone takes milliseconds: more runs for a steadier median.
const INGEST_RUNS: usize = 7;

struct Row {
    name: String,
    sequences: usize,
    timing: Timing,
    blocks: u64,
    /// The lower bound on blocks (bload's; 0 for seqpacker).
    bound: u64,
    padding: u64,
    peak_bytes: usize,
}

fn print_row(row: &Row) {
    println!(
        "{:<34} {:>10} {:>8.3} {:>8.3} {:>8.2} {:>7.1} {:>9} {:>11} {:>7.1}",
        row.name,
        row.sequences,
        row.timing.median,
        row.timing.fastest,
        row.sequences as f64 / row.timing.median / 1e6,
        row.timing.median * 1e9 / row.sequences as f64,
        row.blocks,
        row.padding,
        row.peak_bytes as f64 / row.sequences as f64,
    );
}

fn bload_row(name: &str, lengths: &[u32], options: &Options) -> Row {
    let (plan, timing, peak_bytes) = measure_on_copies(lengths, RUNS, |input| {
        let planner = Planner::new(input, options.clone()).expect("valid bench input");
        planner.plan(0).expect("memory for the bench plan")
    });
    Row {
        name: format!("bload best_fit {name}"),
        sequences: lengths.len(),
        timing,
        blocks: plan.stats().blocks,
        bound: plan.stats().lower_bound.blocks,
        padding: plan.stats().padding,
        peak_bytes,
    }
}

/// seqpacker refuses sequences longer than the block, so it gets the same chunks bload packs:
/// full `t_max` chunks plus the tail.
fn seqpacker_row(name: &str, lengths: &[u32], t_max: u32) -> Row {
    let mut chunks: Vec<usize> = Vec::with_capacity(lengths.len());
    for &length in lengths {
        let (full, tail) = (length / t_max, length % t_max);
        chunks.extend(std::iter::repeat_n(t_max as usize, full as usize));
        if tail > 0 {
            chunks.push(tail as usize);
        }
    }
    let packer =
        Packer::new(t_max as usize).with_strategy(PackStrategy::OptimizedBestFitDecreasing);
    let (result, timing, peak_bytes) =
        measure(RUNS, || packer.pack_lengths(&chunks).expect("packs"));
    Row {
        name: format!("seqpacker OBFD {name}"),
        sequences: lengths.len(),
        timing,
        blocks: result.packs.len() as u64,
        bound: 0,
        padding: result.metrics.padding_tokens as u64,
        peak_bytes,
    }
}

/// Comma-separated sizes from `variable`, or `default`.
fn sizes(variable: &str, default: &str) -> Vec<usize> {
    std::env::var(variable)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .map(|size| {
            size.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{variable}: comma-separated integers"))
        })
        .collect()
}

/// Each hard set's blocks against the lower bound, and how long planning it took.
fn hard_set_rows() {
    println!();
    println!(
        "{:<32} {:>9} {:>7} {:>7} {:>6} {:>9}",
        "hard set", "sequences", "blocks", "bound", "above", "median_ms"
    );
    let (mut at_bound, mut within_one, mut above, mut count) = (0, 0, 0, 0);
    let mut slowest = 0.0f64;
    for (name, t_max, lengths) in hard_sets::hard_sets() {
        let row = bload_row(&name, &lengths, &Options::new(t_max));
        let over = row.blocks - row.bound;
        println!(
            "{:<32} {:>9} {:>7} {:>7} {:>6} {:>9.3}",
            name,
            lengths.len(),
            row.blocks,
            row.bound,
            over,
            row.timing.median * 1e3
        );
        count += 1;
        at_bound += usize::from(over == 0);
        within_one += usize::from(over <= 1);
        above += over;
        slowest = slowest.max(row.timing.median);
    }
    println!(
        "{count} sets: {at_bound} at the bound, {within_one} within one block, {above} blocks \
         above in all; slowest median {:.1} ms",
        slowest * 1e3
    );
}

/// `Planner::new` alone (no plan) on the lengths file `BLOAD_BENCH_LENGTHS`: one line
/// `planner_new_median_s SECONDS` for scripts (`benches/ingest.py`), then lines for people:
/// that baseline's figures, and the rows beside it that explain the Python ones.
fn ingest_row() {
    let path = std::env::var("BLOAD_BENCH_LENGTHS")
        .expect("BLOAD_BENCH_ONLY=ingest: BLOAD_BENCH_LENGTHS names a lengths file");
    let t_max: u32 = std::env::var("BLOAD_BENCH_T_MAX").map_or(2048, |value| {
        value
            .trim()
            .parse()
            .expect("BLOAD_BENCH_T_MAX: an integer from 1 to 4294967295")
    });
    let lengths = read_lengths(Path::new(&path)).unwrap_or_else(|err| panic!("{err}"));
    let options = Options::new(t_max);
    // What is timed is the checks and per-length tables the planner builds.
    let (_, baseline, peak_bytes) = measure_on_copies(&lengths, INGEST_RUNS, |input| {
        Planner::new(input, options.clone()).expect("valid bench input")
    });
    println!("planner_new_median_s {:.9}", baseline.median);
    println!(
        "Planner::new of {} lengths from {path} (t_max {t_max}): median {:.3} ms, fastest {:.3} \
         ms of {INGEST_RUNS} runs, {:.2} ns/seq, peak heap {:.1} B/seq above the lengths",
        lengths.len(),
        baseline.median * 1e3,
        baseline.fastest * 1e3,
        baseline.median * 1e9 / lengths.len() as f64,
        peak_bytes as f64 / lengths.len() as f64,
    );
    // Beside the baseline, for reading the Python rows (not the baseline, which stays the
    // constructor of lengths already in the core's form): the core's own ingestion of the same
    // values as i64 and i32 (what the bridge calls), and `Planner::new` of a copy made inside
    // the clock, as a Rust caller pays whose lengths are not already a `Vec<u32>` to give away.
    let wide: Vec<i64> = lengths.iter().map(|&length| i64::from(length)).collect();
    let (_, from_i64, _) = measure(INGEST_RUNS, || {
        Planner::from_lengths(&wide, options.clone()).expect("valid bench input")
    });
    drop(wide);
    let narrow: Vec<i32> = lengths.iter().map(|&length| length as i32).collect();
    let (_, from_i32, _) = measure(INGEST_RUNS, || {
        Planner::from_lengths(&narrow, options.clone()).expect("valid bench input")
    });
    drop(narrow);
    let (_, copied, _) = measure(INGEST_RUNS, || {
        Planner::new(lengths.to_vec(), options.clone()).expect("valid bench input")
    });
    for (what, timing) in [
        ("Planner::from_lengths(&[i64])", from_i64),
        ("Planner::from_lengths(&[i32])", from_i32),
        ("Planner::new(lengths.to_vec()), copy timed", copied),
    ] {
        println!(
            "{what}: median {:.3} ms, fastest {:.3} ms, {:.2}x the baseline",
            timing.median * 1e3,
            timing.fastest * 1e3,
            timing.median / baseline.median,
        );
    }
}

/// `lanes` beside `best_fit` on the same lengths: `Planner::new` and `plan(0)` of each, the
/// policies alternating within each of `RUNS` rounds so that both see the same load of a shared
/// machine; medians, and lanes' median over best_fit's.
fn lanes_rows() {
    println!();
    println!(
        "{:<28} {:>10} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7}",
        "lanes / best_fit",
        "sequences",
        "lanes_s",
        "l_best_s",
        "fit_s",
        "f_best_s",
        "ratio",
        "B/seq"
    );
    println!("(median and fastest of {RUNS} alternating rounds; ratio of the medians; B/seq: lanes' peak heap)");
    for size in sizes("BLOAD_BENCH_LANES_SIZES", "5000000,50000000") {
        let lengths = lognormal_lengths(size, 760.0, 4096);
        let mut options = Options::new(4096);
        options.world_size = 8;
        options.blocks_per_batch = 4;
        let (mut lanes, mut best_fit) = (Vec::new(), Vec::new());
        let mut peak = 0;
        for _ in 0..RUNS {
            for (policy, seconds) in [
                (Policy::BestFit, &mut best_fit),
                (Policy::Lanes, &mut lanes),
            ] {
                let options = Options {
                    policy,
                    ..options.clone()
                };
                let (plan, timing, peak_bytes) = measure_on_copies(&lengths, 1, |input| {
                    let planner = Planner::new(input, options.clone()).expect("valid bench input");
                    planner.plan(0).expect("memory for the bench plan")
                });
                seconds.push(timing.median);
                if policy == Policy::Lanes {
                    peak = peak.max(peak_bytes);
                }
                drop(plan);
            }
        }
        let (lanes, best_fit) = (timing_of(lanes), timing_of(best_fit));
        println!(
            "{:<28} {:>10} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>6.2}x {:>7.1}",
            format!("lognormal {}M t4096 8x4", size as f64 / 1e6),
            size,
            lanes.median,
            lanes.fastest,
            best_fit.median,
            best_fit.fastest,
            lanes.median / best_fit.median,
            peak as f64 / size as f64,
        );
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not supported and ignored.
    match std::env::var("BLOAD_BENCH_ONLY").as_deref() {
        Ok("hard_sets") => return hard_set_rows(),
        Ok("ingest") => return ingest_row(),
        Ok("lanes") => return lanes_rows(),
        _ => {}
    }
    let sizes_2048 = sizes("BLOAD_BENCH_SIZES", "1000000,10000000");
    println!(
        "{:<34} {:>10} {:>8} {:>8} {:>8} {:>7} {:>9} {:>11} {:>7}",
        "planner / lengths",
        "sequences",
        "median_s",
        "best_s",
        "Mseq/s",
        "ns/seq",
        "blocks",
        "padding",
        "B/seq"
    );
    println!("(median and fastest of {RUNS} runs; Mseq/s from the median; B/seq: peak heap per sequence)");
    for size in sizes_2048 {
        let lengths = lognormal_lengths(size, 200.0, 2048);
        let name = format!("lognormal {}M t2048", size as f64 / 1e6);
        print_row(&bload_row(&name, &lengths, &Options::new(2048)));
        print_row(&seqpacker_row(&name, &lengths, 2048));
    }
    // Large blocks: 1M lengths of median 2,000 steps in blocks of 65,536.
    let lengths = lognormal_lengths(1_000_000, 2000.0, 65_536);
    print_row(&bload_row(
        "lognormal 1M t65536",
        &lengths,
        &Options::new(65_536),
    ));
    print_row(&seqpacker_row("lognormal 1M t65536", &lengths, 65_536));
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data");
    for (file, t_max) in [
        ("action_genome_like.lengths", 94),
        ("speech_like.lengths", 2450),
        ("text_like.lengths", 2048),
    ] {
        let lengths = read_lengths(&data.join(file)).expect("bundled data");
        let mut options = Options::new(t_max);
        options.oversize = Oversize::Split;
        let name = file.trim_end_matches(".lengths");
        print_row(&bload_row(name, &lengths, &options));
        print_row(&seqpacker_row(name, &lengths, t_max));
    }
    // Epochs of any size: median 760, sigma 1, within 1..=4096 (mean about 990 steps), so 100M
    // sequences hold about 10^11 steps. Only bload: seqpacker would need about 12 GB here.
    for size in sizes("BLOAD_BENCH_SCALE_SIZES", "1000000,10000000,100000000") {
        let lengths = lognormal_lengths(size, 760.0, 4096);
        let name = format!("lognormal {}M t4096", size as f64 / 1e6);
        let row = bload_row(&name, &lengths, &Options::new(4096));
        print_row(&row);
        let steps: u64 = lengths.iter().map(|&length| u64::from(length)).sum();
        println!(
            "  {steps} steps; lower bound {} blocks, {:.4}% below the plan's",
            row.bound,
            (row.blocks - row.bound) as f64 * 100.0 / row.bound as f64
        );
    }
    lanes_rows();
    hard_set_rows();
}
