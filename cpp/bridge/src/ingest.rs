//! Lengths from C++ and Python (int32 or int64, read in place) narrowed into the core's 32 bits a
//! sequence. This copy is all that ingestion adds to `Planner::new` (benches/ingest.py), so it is
//! made in one pass, into memory that faults in as few pages as the system allows.

use crate::guard::sized;
use bload::Error;

/// `lengths` as `u32`, or the error naming the first that is not within `0..=u32::MAX` (the core
/// then checks each against 1 and `t_max`). One pass converts and notes whether any was out of
/// range, simple enough to vectorise; only then is the out-of-range one looked for.
pub(crate) fn narrowed<T: Copy + Into<i64>>(lengths: &[T]) -> bload::Result<Vec<u32>> {
    let fits = |length: i64| (0..=i64::from(u32::MAX)).contains(&length);
    let mut narrow = fresh_lengths(lengths.len())?;
    let mut all_fit = true;
    narrow.extend(lengths.iter().map(|&length| {
        let length = length.into();
        all_fit &= fits(length);
        length as u32
    }));
    if all_fit {
        return Ok(narrow);
    }
    let i = lengths
        .iter()
        .position(|&length| !fits(length.into()))
        .unwrap_or_default();
    Err(Error::invalid(
        format!("lengths[{i}]"),
        lengths[i].into(),
        format!("a length from 1 to {} steps", u32::MAX),
    ))
}

/// An empty vector with room for `len` lengths. A large one is fresh memory from the system,
/// which the kernel hands out a page at a time as it is first written: on 4 KiB pages, 10M
/// lengths (40 MB) fault about 10,000 times, which took longer than the core's whole
/// `Planner::new` on them. Asking for transparent huge pages (which Linux gives on request where
/// `transparent_hugepage/enabled` is `madvise`, a common default, or `always`) makes that about
/// 20 faults. A hint only: the contents and
/// every result are the same without it.
fn fresh_lengths(len: usize) -> bload::Result<Vec<u32>> {
    let vec: Vec<u32> = sized("the lengths as 32-bit integers", len)?;
    advise_huge_pages(vec.as_ptr().cast(), len.saturating_mul(size_of::<u32>()));
    Ok(vec)
}

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
fn advise_huge_pages(start: *const u8, bytes: usize) {
    // The advice applies to whole pages: the huge pages wholly inside the allocation. (14 is
    // MADV_HUGEPAGE in Linux's generic numbering, which these two architectures use.)
    const MADV_HUGEPAGE: i32 = 14;
    // A huge page on these systems (with 4 KiB base pages).
    const HUGE_PAGE: usize = 2 << 20;
    extern "C" {
        fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
    }
    if bytes < 2 * HUGE_PAGE {
        return;
    }
    let first = (start as usize).next_multiple_of(HUGE_PAGE);
    let end = (start as usize + bytes) / HUGE_PAGE * HUGE_PAGE;
    if end > first {
        // SAFETY: the range lies within an allocation this process owns and nothing has read or
        // written yet; madvise(MADV_HUGEPAGE) changes how its pages are backed, never their
        // contents. Its result is ignored: where huge pages are off, the pages stay small.
        unsafe { madvise(first as *mut std::ffi::c_void, end - first, MADV_HUGEPAGE) };
    }
}

#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
fn advise_huge_pages(_start: *const u8, _bytes: usize) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_narrow_or_name_the_first_out_of_range() {
        let many: Vec<i32> = (0..3_000_000).map(|i| 1 + i % 4096).collect();
        assert_eq!(
            narrowed(&many).unwrap(),
            many.iter().map(|&l| l as u32).collect::<Vec<_>>()
        );
        assert_eq!(
            narrowed(&[0i64, 7, i64::from(u32::MAX)]).unwrap(),
            [0, 7, u32::MAX]
        );
        let error = narrowed(&[3i64, 1 << 32, -1]).unwrap_err().to_string();
        assert!(
            error.contains("lengths[1]") && error.contains("4294967296"),
            "{error}"
        );
        let error = narrowed(&[3i32, 4, -2]).unwrap_err().to_string();
        assert!(
            error.contains("lengths[2]") && error.contains("-2"),
            "{error}"
        );
    }
}
