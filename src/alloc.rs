//! Fallible allocations of the vectors that grow with the input (per sequence, per piece, per
//! block, per length up to `t_max`).
//!
//! Rust aborts the process when an ordinary allocation fails; a dataset too large for the
//! machine's memory must instead get an error that says what was being built and how large, so
//! each such vector is sized up front, through these helpers, before anything is written to it.

use crate::error::{Error, Result};
use std::mem::size_of;

/// `len` copies of `value`.
pub(crate) fn try_vec<T: Clone>(what: &str, len: usize, value: T) -> Result<Vec<T>> {
    let mut vec = try_with_capacity(what, len)?;
    vec.resize(len, value);
    Ok(vec)
}

/// An empty vector with room for exactly `capacity` elements.
pub(crate) fn try_with_capacity<T>(what: &str, capacity: usize) -> Result<Vec<T>> {
    let mut vec = Vec::new();
    try_reserve(&mut vec, what, capacity)?;
    Ok(vec)
}

/// Room for exactly `additional` more elements in `vec`.
pub(crate) fn try_reserve<T>(vec: &mut Vec<T>, what: &str, additional: usize) -> Result<()> {
    vec.try_reserve_exact(additional)
        .map_err(|_| out_of_memory::<T>(what, vec.len().saturating_add(additional)))
}

/// [`try_with_capacity`] whose room is advised to use huge pages (`advise_huge_pages`) before
/// anything is written to it: for the large vectors written or read across their whole length,
/// which in 4 KiB pages fault in a page at a time and miss the TLB at every random access.
/// Its users, and what it saved each:
/// - the vectors shuffled across their whole length (the plan's blocks, the sequences sorted by
///   length);
/// - a packer's output (the packed lengths, which become the plan's pieces, and the ends of its
///   blocks): on Graphcore's Wikipedia histogram (97 MB of them) `best_fit`'s fill took about
///   27 ms of CPU time instead of 85 (backing the 4 KiB pages beforehand,
///   `MADV_POPULATE_WRITE`, saved nothing). At 50M sequences, `best_fit` with every large
///   buffer advised took 0.95 s against 1.16 (BENCHMARKS.md, issue 26);
/// - the lengths a planner copies from a caller's integers (`plan/ingest.rs`).
pub(crate) fn try_with_capacity_huge<T>(what: &str, capacity: usize) -> Result<Vec<T>> {
    let mut vec = try_with_capacity(what, capacity)?;
    advise_huge_pages(&mut vec);
    Ok(vec)
}

/// [`try_with_capacity`] for a vector whose first `scattered` places are then written at
/// scattered places (a counting sort's output, where every length writes its own stream).
///
/// Its room, when at most [`SCATTERED_HUGE_MOST`] bytes, is advised to use huge pages
/// (`advise_huge_pages`). The thousands of streams fall in as many 4 KiB pages, more than the
/// TLB holds; in huge pages the sort of `lanes` took about 9 ms less at 5M sequences (a 20 MB
/// vector). Larger vectors keep 4 KiB pages: at 50M (200 MB) advising made the plan slower,
/// and its time far more variable, on the machine measured (BENCHMARKS.md, issue 26, fourth
/// pass).
///
/// The places to be written are then backed with memory at once (`populate_for_writing`),
/// rather than a page at a time as the scatter first writes each: the scatter prefetches the
/// places it writes next, and a prefetch of a page not yet backed is dropped.
pub(crate) fn try_with_capacity_to_scatter<T>(
    what: &str,
    capacity: usize,
    scattered: usize,
) -> Result<Vec<T>> {
    let mut vec = try_with_capacity(what, capacity)?;
    if vec.capacity().saturating_mul(size_of::<T>()) <= SCATTERED_HUGE_MOST {
        advise_huge_pages(&mut vec);
    }
    populate_for_writing(&mut vec, scattered);
    Ok(vec)
}

/// The largest vector [`try_with_capacity_to_scatter`] advises to use huge pages.
const SCATTERED_HUGE_MOST: usize = 64 << 20;

/// The size of a huge page on the machines bload runs on (x86-64 and aarch64 Linux, 4 KiB base
/// pages).
const HUGE_PAGE: usize = 2 << 20;

/// Asks the kernel to back the room of `vec`, if it spans whole huge pages, with transparent
/// huge pages where the system allows them (`madvise` mode, the usual default, leaves it to the
/// program). A Fisher-Yates shuffle of a large array swaps items at random across it: in 4 KiB
/// pages nearly every swap misses the TLB as well as the caches, and each page is a fault of
/// its own when first written. Advised, the first shuffle of `lanes` took 45% less time at 50M
/// sequences (BENCHMARKS.md, issue 26). Only for the users `try_with_capacity_huge` names:
/// advising every large buffer made the later, larger, written-in-order ones of `lanes` far
/// slower to fault in at 50M on the machine measured. A hint only: it changes no result, and
/// where it is refused the pages stay 4 KiB. Only the huge pages wholly inside the allocation
/// are advised, so nothing else is touched.
fn advise_huge_pages<T>(vec: &mut Vec<T>) {
    #[cfg(target_os = "linux")]
    {
        let bytes = vec.capacity().saturating_mul(size_of::<T>());
        if bytes < 2 * HUGE_PAGE {
            return;
        }
        let start = vec.as_mut_ptr() as usize;
        let first = start.next_multiple_of(HUGE_PAGE);
        let end = (start + bytes) / HUGE_PAGE * HUGE_PAGE;
        if end > first {
            // SAFETY: the range lies within `vec`'s allocation, and MADV_HUGEPAGE changes how
            // its pages are backed, never their contents.
            unsafe {
                libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (vec, HUGE_PAGE);
}

/// Asks the kernel (Linux 5.14 and later) to back the whole 4 KiB pages of the first `len`
/// places of `vec`'s room with memory now, as its first write to each would, but in one call
/// (`MADV_POPULATE_WRITE`); for places that are all written next. A hint only: it changes no
/// result, and where it is refused (an older kernel) each page is backed when first written,
/// as without it. Short of memory, it fares as the writes would have.
fn populate_for_writing<T>(vec: &mut Vec<T>, len: usize) {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4 << 10;
        let bytes = len.min(vec.capacity()).saturating_mul(size_of::<T>());
        let start = vec.as_mut_ptr() as usize;
        let first = start.next_multiple_of(PAGE);
        let end = (start + bytes) / PAGE * PAGE;
        if end > first {
            // SAFETY: the range lies within `vec`'s allocation, and MADV_POPULATE_WRITE backs
            // its pages with memory (zeroed where new), never changing what was written.
            unsafe {
                libc::madvise(
                    first as *mut libc::c_void,
                    end - first,
                    libc::MADV_POPULATE_WRITE,
                );
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (vec, len);
}

/// `value` pushed onto `vec`, which grows as `Vec::push` grows it (doubling its room), but
/// fallibly: for scratch whose size is known only as it fills (a block's lengths).
pub(crate) fn try_push<T>(vec: &mut Vec<T>, what: &str, value: T) -> Result<()> {
    if vec.len() == vec.capacity() {
        vec.try_reserve(1)
            .map_err(|_| out_of_memory::<T>(what, vec.len().saturating_add(1)))?;
    }
    vec.push(value);
    Ok(())
}

/// A copy of `items`.
pub(crate) fn try_copy<T: Copy>(what: &str, items: &[T]) -> Result<Vec<T>> {
    let mut vec = try_with_capacity(what, items.len())?;
    vec.extend_from_slice(items);
    Ok(vec)
}

/// The error of a vector of `len` elements of `T` that could not be allocated.
pub(crate) fn out_of_memory<T>(what: &str, len: usize) -> Error {
    Error::out_of_memory(what, len, size_of::<T>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sized_vectors_hold_what_was_asked() {
        assert_eq!(try_vec("x", 3, 7u8).unwrap(), [7, 7, 7]);
        let vec: Vec<u64> = try_with_capacity("x", 5).unwrap();
        assert!(vec.is_empty() && vec.capacity() >= 5);
        assert_eq!(try_copy("x", &[1u32, 2]).unwrap(), [1, 2]);
        let mut pushed = Vec::new();
        for value in 0..100u16 {
            try_push(&mut pushed, "x", value).unwrap();
        }
        assert!(pushed.iter().copied().eq(0..100));
    }

    #[test]
    fn an_allocation_too_large_is_an_error_saying_how_large() {
        // More bytes than any address space: refused by the allocator, not an abort.
        let err = try_vec("the plan's spans", usize::MAX / 8, 0u64).unwrap_err();
        assert_eq!(err.argument, "memory for the plan's spans");
        let elements = usize::MAX / 8;
        assert_eq!(
            err.value,
            format!("{elements} elements of 8 bytes ({} bytes)", elements * 8)
        );
        assert!(err.expected.contains("out of memory"), "{err}");
        let mut vec = vec![1u32; 4];
        let err = try_reserve(&mut vec, "x", usize::MAX).unwrap_err();
        assert!(err.value.starts_with(&format!("{} elements", usize::MAX)));
        let more = format!("(more than {} bytes)", usize::MAX);
        assert!(err.value.ends_with(&more), "{err}");
        assert_eq!(vec, [1, 1, 1, 1]);
    }
}
