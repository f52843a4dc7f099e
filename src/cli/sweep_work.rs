//! What a sweep will cost, estimated before it plans anything: a sweep of a wide range at many
//! points (`--t-max 1..16777216 --points 1000`) runs for a quarter of an hour, and a user who
//! typed it by mistake should hear so at once rather than wait, with the flag that runs it anyway.
//!
//! A plan's time grows with the pieces it packs (each sequence whole, or with `--split` each
//! chunk of at most `t_max` steps) and with `t_max` itself (the per-length tables and the
//! packers' scans by length): measured, both cost about the same per unit, some 20 to 50 ns on
//! one core. A sweep plans three policies at each block size it does plan.

use bload::Error;

/// The work past which a sweep is refused without `--force`: about a minute at the rates above,
/// a hundred times the largest sweep of the docs and tests (the speech-shaped set's, 64..4096 at
/// 100 points, about 10^7).
pub const MAX_WORK: u64 = 2_000_000_000;

/// Policies planned at each block size.
const PLANS_PER_POINT: u64 = 3;

/// The estimated work of planning `lengths` (`sequences` of them, `steps` in all) at each of
/// `t_maxes`; a block size below `longest` is skipped unless `split`, as the sweep skips it.
pub fn estimate(sequences: u64, steps: u64, longest: u32, split: bool, t_maxes: &[u32]) -> u64 {
    t_maxes
        .iter()
        .filter(|&&t_max| split || t_max >= longest)
        .map(|&t_max| {
            // Every chunk of a split sequence is a piece: at most one more than it has t_maxes.
            let pieces = if split {
                sequences.saturating_add(steps / u64::from(t_max))
            } else {
                sequences
            };
            PLANS_PER_POINT.saturating_mul(pieces.saturating_add(u64::from(t_max)))
        })
        .fold(0u64, u64::saturating_add)
}

/// The error of a sweep of `work` past [`MAX_WORK`], of `asked` points (`--points`), which are
/// `points` block sizes in `first..last`.
pub fn too_much(
    work: u64,
    (first, last): (u32, u32),
    asked: u32,
    points: usize,
    sequences: u64,
) -> Error {
    Error::invalid(
        format!("--t-max {first}..{last} --points {asked}"),
        format!(
            "about {work} units of planning work ({PLANS_PER_POINT} plans at each of {points} \
             block sizes, each costing its pieces ({sequences} sequences, more with --split) plus \
             its t_max: minutes, or hours)"
        ),
        format!(
            "at most {MAX_WORK} (about a minute): fewer --points, a narrower --t-max, or --force \
             to run it anyway"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_work_counts_the_pieces_and_t_max_of_each_planned_point() {
        // Below the longest sequence nothing is planned without --split.
        assert_eq!(estimate(10, 100, 20, false, &[10, 20, 30]), 3 * (30 + 40));
        // With --split every block size is planned, its chunks counted.
        assert_eq!(estimate(10, 100, 20, true, &[10]), 3 * (10 + 10 + 10));
        assert_eq!(estimate(u64::MAX, 1, 1, false, &[1, 2]), u64::MAX);
    }
}
