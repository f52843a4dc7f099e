//! `cargo bench --bench shared_plan`: one epoch served to the 8 ranks of a node, planned once
//! into a shared plan file that every rank maps (docs/shared_plans.md), beside 8 ranks that each
//! plan it themselves, all 8 processes at once in both runs. Lognormal lengths (median 200) in
//! blocks of 4,096, 8 ranks x 4 blocks, best_fit. Each rank reports the time until its plan is
//! ready, the time to serve its batches (every block table of its shard), the memory its planner
//! and plan hold of their own (`private_memory`, what the allocator gave them), its peak
//! resident memory (VmHWM) and its private resident memory while serving (Private_* of
//! /proc/self/smaps_rollup: the mapped plan's pages are shared, not counted there). The writer
//! plans from its own lengths, then keeps the file's in their place (`with_lengths_of`) as a
//! sampler does; after serving it plans epoch 1 from those mapped lengths into a file too, and
//! reports the peak heap of that plan (beyond what it held before) as its planning peak from
//! epoch 1 on.
//!
//! `BLOAD_BENCH_SHARED_SIZES=20000000,100000000` sets the counts (default 20M);
//! `BLOAD_BENCH_SHARED_ONLY=shared` leaves out the 8 private planners (for counts whose 8 copies
//! do not fit the machine's memory). Files go to `BLOAD_BENCH_SHARED_DIR` (default: /dev/shm).

use bload::{Options, Planner, Policy};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::lognormal_lengths;
#[path = "common/counting.rs"]
mod counting;
use counting::{CountingAllocator, LIVE, PEAK};
use std::sync::atomic::Ordering;

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

const RANKS: u32 = 8;
const T_MAX: u32 = 4096;

fn options() -> Options {
    let mut options = Options::new(T_MAX);
    options.world_size = RANKS;
    options.blocks_per_batch = 4;
    options.policy = Policy::BestFit;
    options
}

/// `key:` of /proc/self/<file>, in kB.
fn proc_kb(file: &str, key: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/self/{file}")).unwrap_or_default();
    text.lines()
        .filter(|line| line.starts_with(key))
        .filter_map(|line| line.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum()
}

/// One rank's part, in a child process: prints one line of figures.
fn rank(role: &str, rank: u32, count: usize, dir: &Path) {
    let start = Instant::now();
    let wait = Duration::from_secs(600);
    let (planner, plan) = match role {
        "private" => {
            let planner = Planner::new(lognormal_lengths(count, 200.0, T_MAX), options()).unwrap();
            let plan = planner.plan(0).unwrap();
            (planner, plan)
        }
        "writer" => {
            let planner = Planner::new(lognormal_lengths(count, 200.0, T_MAX), options()).unwrap();
            planner.write_shared_plan(0, dir).unwrap();
            let plan = planner.map_shared_plan(0, dir, wait).unwrap();
            // Its own lengths dropped with the planner that held them.
            (planner.with_lengths_of(&plan).unwrap(), plan)
        }
        _ => Planner::from_shared_plan(options(), 0, dir, wait).unwrap(),
    };
    let ready = start.elapsed().as_secs_f64();
    let serve = Instant::now();
    let mut pieces = 0usize;
    for batch in plan.rank_batches(rank).unwrap() {
        for block in batch.blocks() {
            pieces += block.pieces().count();
        }
    }
    let served = serve.elapsed().as_secs_f64();
    let own = planner.private_memory().bytes + plan.private_memory().bytes;
    let private_kb = proc_kb("smaps_rollup", "Private_Dirty:");
    let hwm_kb = proc_kb("status", "VmHWM:");
    // The writer's next epoch, planned from the lengths mapped from epoch 0's file.
    let mut next_peak = 0;
    if role == "writer" {
        let base = LIVE.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        planner.write_shared_plan(1, dir).unwrap();
        next_peak = PEAK.load(Ordering::Relaxed) - base;
    }
    println!(
        "{role} {rank} {ready:.3} {served:.3} {own} {hwm_kb} {private_kb} {next_peak} {pieces}"
    );
}

struct Row {
    ready: Vec<f64>,
    served: Vec<f64>,
    own: Vec<u64>,
    hwm_kb: Vec<u64>,
    private_kb: Vec<u64>,
    next_peak: Vec<u64>,
}

/// Runs the 8 ranks of one node at once; the wall time and each rank's figures.
fn node(shared: bool, count: usize, dir: &Path) -> (f64, Row) {
    let exe = std::env::current_exe().unwrap();
    let start = Instant::now();
    let children: Vec<_> = (0..RANKS)
        .map(|rank| {
            let role = match (shared, rank) {
                (false, _) => "private",
                (true, 0) => "writer",
                (true, _) => "reader",
            };
            Command::new(&exe)
                .env("BLOAD_BENCH_SHARED_RANK", format!("{role} {rank} {count}"))
                .env("BLOAD_BENCH_SHARED_DIR", dir)
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut row = Row {
        ready: vec![],
        served: vec![],
        own: vec![],
        hwm_kb: vec![],
        private_kb: vec![],
        next_peak: vec![],
    };
    for child in children {
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success(), "a rank failed");
        let line = String::from_utf8_lossy(&output.stdout).into_owned();
        let fields: Vec<&str> = line.split_whitespace().collect();
        row.ready.push(fields[2].parse().unwrap());
        row.served.push(fields[3].parse().unwrap());
        row.own.push(fields[4].parse().unwrap());
        row.hwm_kb.push(fields[5].parse().unwrap());
        row.private_kb.push(fields[6].parse().unwrap());
        row.next_peak.push(fields[7].parse().unwrap());
    }
    (start.elapsed().as_secs_f64(), row)
}

fn max<T: Copy + PartialOrd>(values: &[T]) -> T {
    values
        .iter()
        .copied()
        .fold(values[0], |a, b| if b > a { b } else { a })
}

fn report(name: &str, count: usize, wall: f64, row: &Row, file_bytes: u64) {
    let mib = |kb: u64| kb as f64 / 1024.0;
    let per_sequence = |bytes: u64| bytes as f64 / count as f64;
    println!(
        "{name:>8} {count:>11} {wall:>8.2} {:>9.2} {:>8.2} {:>10.3} {:>10.3} {:>11.0} {:>9.0} {:>10.0} {:>9.1} {:>9.2}",
        max(&row.ready),
        max(&row.served),
        per_sequence(max(&row.own[1..])),
        per_sequence(row.own[0]),
        mib(max(&row.hwm_kb[1..])),
        mib(row.hwm_kb[0]),
        mib(max(&row.private_kb)),
        file_bytes as f64 / (1 << 20) as f64,
        per_sequence(row.next_peak[0]),
    );
}

fn main() {
    let dir = PathBuf::from(
        std::env::var("BLOAD_BENCH_SHARED_DIR").unwrap_or_else(|_| "/dev/shm".to_string()),
    );
    if let Ok(spec) = std::env::var("BLOAD_BENCH_SHARED_RANK") {
        let parts: Vec<&str> = spec.split(' ').collect();
        rank(
            parts[0],
            parts[1].parse().unwrap(),
            parts[2].parse().unwrap(),
            &dir,
        );
        return;
    }
    let sizes = std::env::var("BLOAD_BENCH_SHARED_SIZES").unwrap_or_else(|_| "20000000".into());
    let only_shared = std::env::var("BLOAD_BENCH_SHARED_ONLY").is_ok_and(|only| only == "shared");
    let dir = dir.join(format!("bload-bench-shared-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    println!("8 ranks of one node, lognormal lengths (median 200), t_max {T_MAX}, 8 ranks x 4 blocks, best_fit");
    println!(
        "{:>8} {:>11} {:>8} {:>9} {:>8} {:>10} {:>10} {:>11} {:>9} {:>10} {:>9} {:>9}",
        "plans",
        "sequences",
        "wall_s",
        "ready_s",
        "serve_s",
        "own_B/seq",
        "own0_B/seq",
        "hwm_MiB",
        "hwm0_MiB",
        "dirty_MiB",
        "file_MiB",
        "next0_B/seq"
    );
    for count in sizes
        .split(',')
        .map(|size| size.trim().parse::<usize>().unwrap())
    {
        let (wall, row) = node(true, count, &dir);
        let path = Planner::shared_plan_path(&dir, &options(), 0);
        let file_bytes = std::fs::metadata(&path).map_or(0, |meta| meta.len());
        report("shared", count, wall, &row, file_bytes);
        std::fs::remove_file(&path).unwrap();
        std::fs::remove_file(Planner::shared_plan_path(&dir, &options(), 1)).unwrap();
        if !only_shared {
            let (wall, row) = node(false, count, &dir);
            report("private", count, wall, &row, 0);
        }
    }
    let _ = std::fs::remove_dir(&dir);
}
