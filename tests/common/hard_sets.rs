//! Small hard length sets (issue 13): a few hundred sequences whose lengths are a large share of
//! `t_max` (from about `t_max / 13` to `t_max`), where filling one block at a time ends a few
//! blocks above the lower bound. Drawn from seeded ChaCha8, so every test and bench run, on every
//! machine, sees the same sets. Shared by `tests/contract.rs` and `benches/plan.rs` (`#[path]`).

use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// How the lengths spread over `[t_max / 13, t_max]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Uniform,
    /// Median `t_max / 3`, sigma 0.7, redrawn until in range: most lengths short, a long tail.
    Lognormal,
    /// Whole blocks cut into 2 or 3 lengths: the fewest blocks is known (the volume bound, met
    /// by the blocks cut), and only a packing that fills every block exactly reaches it.
    Cut,
}

/// `count` lengths in `[max(1, t_max / 13), t_max]` (for `Cut`, up to 2 more: whole blocks).
pub fn hard_set(count: usize, t_max: u32, shape: Shape, seed: u64) -> Vec<u32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let low = (t_max / 13).max(1);
    let uniform = move |rng: &mut ChaCha8Rng| (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    let mut lengths = Vec::with_capacity(count + 2);
    while shape == Shape::Cut && lengths.len() < count {
        let parts = 2 + (rng.next_u32() % 2) as usize;
        let mut cuts: Vec<u32> = (1..parts)
            .map(|_| 1 + rng.next_u32() % (t_max - 1))
            .collect();
        cuts.extend([0, t_max]);
        cuts.sort_unstable();
        if cuts.windows(2).all(|pair| pair[1] - pair[0] >= low) {
            lengths.extend(cuts.windows(2).map(|pair| pair[1] - pair[0]));
        }
    }
    while lengths.len() < count {
        let length = match shape {
            // (Modulo bias is under 2^-32 here; the sets only need to be fixed, not perfect.)
            Shape::Uniform => low + (rng.next_u64() % u64::from(t_max - low + 1)) as u32,
            Shape::Lognormal => {
                let (u, v) = (uniform(&mut rng), uniform(&mut rng));
                let normal = (-2.0 * (1.0 - u).ln()).sqrt() * (std::f64::consts::TAU * v).cos();
                (f64::from(t_max) / 3.0 * (0.7 * normal).exp()).round() as u32
            }
            Shape::Cut => unreachable!("cut above"),
        };
        if (low..=t_max).contains(&length) {
            lengths.push(length);
        }
    }
    lengths
}

/// The sets the tests and the bench use: `(name, t_max, lengths)` for 300 to 500 sequences, every
/// shape, several block sizes and seeds.
pub fn hard_sets() -> Vec<(String, u32, Vec<u32>)> {
    let mut sets = Vec::new();
    for (t_max, count) in [(94, 300), (512, 400), (2048, 350), (4096, 500), (8192, 450)] {
        for shape in [Shape::Uniform, Shape::Lognormal, Shape::Cut] {
            for seed in 0..4 {
                let name = format!("{shape:?} n{count} t{t_max} seed {seed}").to_lowercase();
                sets.push((name, t_max, hard_set(count, t_max, shape, seed)));
            }
        }
    }
    sets
}
