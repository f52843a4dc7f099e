//! The median and fastest of a bench's rounds (shared by `plan.rs`, `cost.rs` and `records.rs`).

pub struct Timing {
    pub median: f64,
    pub fastest: f64,
}

/// The median and fastest of `seconds` (at least one round).
pub fn timing_of(mut seconds: Vec<f64>) -> Timing {
    seconds.sort_by(f64::total_cmp);
    Timing {
        median: seconds[seconds.len() / 2],
        fastest: seconds[0],
    }
}
