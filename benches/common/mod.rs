//! The benches' synthetic lengths, the same on every machine (shared by `plan.rs` and `cost.rs`).

/// Lognormal lengths (sigma 1) redrawn until in 1..=t_max; xorshift and Box-Muller written out
/// so the data set is the same on every machine.
pub fn lognormal_lengths(count: usize, median: f64, t_max: u32) -> Vec<u32> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut uniform = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    let mut lengths = Vec::with_capacity(count);
    while lengths.len() < count {
        let normal =
            (-2.0 * uniform().ln()).sqrt() * (2.0 * std::f64::consts::PI * uniform()).cos();
        let length = (median.ln() + normal).exp().round();
        if (1.0..=f64::from(t_max)).contains(&length) {
            lengths.push(length as u32);
        }
    }
    lengths
}
