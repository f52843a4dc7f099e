//! Lengths held in a caller's integers (a C++ vector, a Python tensor or numpy array: int32 or
//! int64, read in place) taken into the core's 32 bits a sequence.
//!
//! The planner owns its lengths (a caller's tensor could change after the planner is made), so
//! they are copied; [`Planner::from_lengths`] makes that copy in the pass that checks and gathers
//! them (`validate.rs`'s tally, run on each chunk as it is copied), so the caller's lengths are
//! read from memory once and ingestion adds no pass of its own to [`Planner::new`]'s
//! (`benches/ingest.py`). The one check that is ingestion's own,
//! that a length fits 32 bits, is noted in that pass and the out-of-range length looked for
//! only when there is one.

use super::shared::Column;
use super::validate::{check_count, Gathered, Tally};
use super::Planner;
use crate::alloc::try_with_capacity_huge;
use crate::error::{Error, Result};
use crate::options::Options;
use std::sync::Arc;

mod sealed {
    pub trait Sealed {}
    impl Sealed for u32 {}
    impl Sealed for i32 {}
    impl Sealed for i64 {}
}

/// An integer type lengths may arrive in: `u32` (the core's own), `i32` or `i64`.
pub trait LengthInteger: Copy + Into<i64> + sealed::Sealed {
    /// The length as the core's `u32`, and whether it fits (when not, the first is meaningless).
    fn narrow(self) -> (u32, bool);
}

impl LengthInteger for u32 {
    #[inline(always)]
    fn narrow(self) -> (u32, bool) {
        (self, true)
    }
}

impl LengthInteger for i32 {
    #[inline(always)]
    fn narrow(self) -> (u32, bool) {
        (self as u32, self >= 0)
    }
}

impl LengthInteger for i64 {
    #[inline(always)]
    fn narrow(self) -> (u32, bool) {
        // Negative lengths wrap to above u32::MAX as u64: one comparison checks both ends.
        (self as u32, self as u64 <= u64::from(u32::MAX))
    }
}

impl Planner {
    /// [`Planner::new`] of lengths in a caller's integers, copied into the planner in the one pass
    /// that checks them. Errors are `Planner::new`'s, and first `lengths[i]` for the first length
    /// outside `0..=u32::MAX` (below 0, or above what 32 bits hold), whatever else is wrong.
    pub fn from_lengths<T: LengthInteger>(lengths: &[T], options: Options) -> Result<Self> {
        let (lengths, gathered) = gather_narrowing(lengths, &options)?;
        Ok(Planner::with_gathered(
            Column::Shared(Arc::new(lengths)),
            options,
            gathered,
        ))
    }
}

/// `lengths` as the core's `u32`, or the error naming the first outside `0..=u32::MAX` (a
/// planner then checks each against 1 and `t_max`): for callers that hand the core a vector,
/// as a mixture's sources.
pub fn narrow_lengths<T: LengthInteger>(lengths: &[T]) -> Result<Vec<u32>> {
    let mut narrow = fresh_lengths(lengths.len())?;
    let mut all_fit = true;
    narrow.extend(lengths.iter().map(|&length| {
        let (length, fits) = length.narrow();
        all_fit &= fits;
        length
    }));
    if !all_fit {
        return Err(first_out_of_range(lengths).unwrap_or_else(out_of_range_unfound));
    }
    Ok(narrow)
}

/// Lengths narrowed and tallied at a time: 16 KiB of `u32`, which stay in a core's L1 cache.
const TALLY_CHUNK: usize = 4096;

/// `validate::gather` of lengths in a caller's integers, which it copies into the core's `u32` as
/// it reads them, a chunk at a time.
fn gather_narrowing<T: LengthInteger>(
    source: &[T],
    options: &Options,
) -> Result<(Vec<u32>, Gathered)> {
    // A length out of range is named before anything else, as when it was narrowed first.
    if let Err(err) = check_count(source.len(), options) {
        return Err(first_out_of_range(source).unwrap_or(err));
    }
    let mut lengths = fresh_lengths(source.len())?;
    let mut tally = Tally::new(options.t_max)?;
    let mut all_fit = true;
    // A chunk at a time: narrowed (a loop simple enough to vectorise), then tallied while it is
    // still in the cache, by the very loop `gather` runs, so the lengths are read from memory
    // once and the tally costs what it costs in `Planner::new`. (One loop doing both, measured
    // beside this by `benches/plan.rs`'s ingest rows, took 1.6x `Planner::new` on i64 lengths,
    // this 1.0 to 1.1x.) An out-of-range length is tallied as its low 32 bits, harmlessly: it is
    // refused just below.
    for chunk in source.chunks(TALLY_CHUNK) {
        let start = lengths.len();
        lengths.extend(chunk.iter().map(|&length| {
            let (length, fits) = length.narrow();
            all_fit &= fits;
            length
        }));
        for &length in &lengths[start..] {
            tally.add(length);
        }
    }
    if !all_fit {
        return Err(first_out_of_range(source).unwrap_or_else(out_of_range_unfound));
    }
    let gathered = tally.finish(&lengths, options)?;
    Ok((lengths, gathered))
}

/// The error of the first length outside `0..=u32::MAX`, if any.
fn first_out_of_range<T: LengthInteger>(lengths: &[T]) -> Option<Error> {
    let i = lengths.iter().position(|&length| !length.narrow().1)?;
    Some(Error::invalid(
        format!("lengths[{i}]"),
        lengths[i].into(),
        format!("a length from 1 to {} steps", u32::MAX),
    ))
}

/// For a pass that saw a length out of range which a second pass did not find: only a bug could
/// do that, and it is reported as one rather than planned.
fn out_of_range_unfound() -> Error {
    Error::invalid(
        "lengths",
        "a length out of range, not found again",
        "lengths from 1 to 4294967295 steps (an internal error in bload; please report it)",
    )
}

/// An empty vector with room for `len` lengths. A large one is fresh memory from the system,
/// which the kernel hands out a page at a time as it is first written: on 4 KiB pages, 10M
/// lengths (40 MB) fault about 10,000 times, which took longer than `Planner::new`'s whole pass
/// over them. Asking for transparent huge pages (which Linux gives on request where
/// `transparent_hugepage/enabled` is `madvise`, a common default, or `always`) makes that about
/// 20 faults. A hint only: the contents and every result are the same without it.
fn fresh_lengths(len: usize) -> Result<Vec<u32>> {
    try_with_capacity_huge("the lengths as 32-bit integers", len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{Oversize, Policy};

    #[test]
    fn lengths_narrow_or_name_the_first_out_of_range() {
        let many: Vec<i32> = (0..3_000_000).map(|i| 1 + i % 4096).collect();
        let expected: Vec<u32> = many.iter().map(|&l| l as u32).collect();
        assert_eq!(narrow_lengths(&many).unwrap(), expected);
        assert_eq!(
            narrow_lengths(&[0i64, 7, i64::from(u32::MAX)]).unwrap(),
            [0, 7, u32::MAX]
        );
        let err = narrow_lengths(&[3i64, 1 << 32, -1]).unwrap_err();
        assert_eq!(
            (err.argument.as_str(), err.value.as_str()),
            ("lengths[1]", "4294967296")
        );
        assert_eq!(err.expected, "a length from 1 to 4294967295 steps");
        let err = narrow_lengths(&[3i32, 4, -2]).unwrap_err();
        assert_eq!(
            (err.argument.as_str(), err.value.as_str()),
            ("lengths[2]", "-2")
        );
        assert_eq!(narrow_lengths(&[5u32, 0]).unwrap(), [5, 0]);
    }

    /// Every planner field `from_lengths` gathers in its pass equals `new`'s of the same lengths.
    fn assert_same_planner(a: &Planner, b: &Planner) {
        assert_eq!(a.lengths(), b.lengths());
        assert_eq!(
            (a.counts.as_slice(), a.class_starts.as_slice()),
            (b.counts.as_slice(), b.class_starts.as_slice())
        );
        assert_eq!(a.oversized, b.oversized);
        assert_eq!(
            (
                a.full_chunks,
                a.packing_bound,
                a.split_pieces,
                a.steps,
                a.longest,
                a.pieces
            ),
            (
                b.full_chunks,
                b.packing_bound,
                b.split_pieces,
                b.steps,
                b.longest,
                b.pieces
            )
        );
        assert_eq!(a.lower_bound, b.lower_bound);
        assert_eq!(a.plan(3).unwrap().hash(), b.plan(3).unwrap().hash());
    }

    #[test]
    fn a_planner_from_wider_integers_is_the_planner_of_their_values() {
        let lengths: Vec<u32> = (0..5000u32).map(|i| 1 + (i * 7919) % 300).collect();
        for (policy, oversize) in [
            (Policy::BestFit, Oversize::Split),
            (Policy::RandomFill, Oversize::Split),
            (Policy::PadToMax, Oversize::Split),
            (Policy::Lanes, Oversize::Reject),
        ] {
            let mut options = Options::new(128);
            (
                options.policy,
                options.oversize,
                options.world_size,
                options.seed,
            ) = (policy, oversize, 3, 11);
            let new = Planner::new(lengths.clone(), options.clone()).unwrap();
            let wide: Vec<i64> = lengths.iter().map(|&l| i64::from(l)).collect();
            let narrow: Vec<i32> = lengths.iter().map(|&l| l as i32).collect();
            assert_same_planner(
                &Planner::from_lengths(&wide, options.clone()).unwrap(),
                &new,
            );
            assert_same_planner(
                &Planner::from_lengths(&narrow, options.clone()).unwrap(),
                &new,
            );
            assert_same_planner(&Planner::from_lengths(&lengths, options).unwrap(), &new);
        }
    }

    #[test]
    fn errors_are_new_s_after_any_length_out_of_range() {
        let message = |lengths: &[i64], options: Options| {
            Planner::from_lengths(lengths, options)
                .unwrap_err()
                .to_string()
        };
        let new_message = |lengths: &[u32], options: Options| {
            Planner::new(lengths.to_vec(), options)
                .unwrap_err()
                .to_string()
        };
        // Out of range first, before the zero, the oversized one and a bad t_max alike.
        let expected = "lengths[2] = -5: expected a length from 1 to 4294967295 steps";
        assert_eq!(message(&[0, 40, -5, 1 << 33], Options::new(10)), expected);
        assert_eq!(message(&[3, 4, -5], Options::new(0)), expected);
        // With every length in range, Planner::new's errors, word for word.
        for (lengths, t_max) in [
            (&[3u32, 0, 5, 0][..], 10),
            (&[3, 40, 5][..], 10),
            (&[3, 4][..], 0),
            (&[][..], 10),
        ] {
            let wide: Vec<i64> = lengths.iter().map(|&l| i64::from(l)).collect();
            assert_eq!(
                message(&wide, Options::new(t_max)),
                new_message(lengths, Options::new(t_max))
            );
        }
        let err = Planner::from_lengths(&[7i32, i32::MIN], Options::new(10)).unwrap_err();
        assert_eq!(
            (err.argument.as_str(), err.value.as_str()),
            ("lengths[1]", "-2147483648")
        );
    }
}
