use bload::{Options, Planner};
use std::time::Instant;
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args[1].parse().unwrap();
    let t_max: u32 = args[2].parse().unwrap();
    let median: f64 = args[3].parse().unwrap();
    let sigma: f64 = args[4].parse().unwrap();
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut uniform = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    let mut lengths = Vec::new();
    while lengths.len() < n {
        let z = (-2.0 * uniform().ln()).sqrt() * (2.0 * std::f64::consts::PI * uniform()).cos();
        let l = (median.ln() + sigma * z).exp().round();
        if l >= 1.0 && l <= t_max as f64 {
            lengths.push(l as u32);
        }
    }
    let total: u64 = lengths.iter().map(|&l| l as u64).sum();
    if total > u32::MAX as u64 {
        println!("total too big");
        return;
    }
    let sizes: Vec<usize> = lengths.iter().map(|&l| l as usize).collect();
    let t = Instant::now();
    let r = seqpacker::Packer::new(t_max as usize)
        .with_strategy(seqpacker::PackStrategy::OptimizedBestFitDecreasing)
        .pack_lengths(&sizes)
        .unwrap();
    println!("seqpacker {:?} blocks {}", t.elapsed(), r.packs.len());
    let t = Instant::now();
    let planner = Planner::new(lengths, Options::new(t_max)).unwrap();
    let plan = planner.plan(0);
    println!(
        "n {n} t_max {t_max}: {:?} blocks {} bound {} padding {}",
        t.elapsed(),
        plan.stats().blocks,
        plan.stats().lower_bound.blocks,
        plan.stats().padding
    );
}
