//! Asking memory for what a loop will read a little later. The planner's large passes (the
//! shuffles, the counting sorts' scatters, the ranks' costs) touch their vectors at places they
//! know some steps ahead; each such read, left to itself, waits for memory in turn, while many
//! asked for early are in flight at once.

/// Asks the processor to bring `items[at]` into its cache, as a read will want it soon; a hint
/// only, which changes no result (and nothing on processors without the instruction here, or
/// where `at` is past the end). Into the second-level cache, not the first: that leaves more
/// loads in flight (on 50M items the lanes' shuffle took a quarter less time than with the
/// first level).
#[inline(always)]
pub(crate) fn prefetch<T>(items: &[T], at: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(item) = items.get(at) {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T2};
        // SAFETY: a prefetch never faults and writes nothing; the address is that of an item.
        unsafe { _mm_prefetch::<_MM_HINT_T2>(std::ptr::from_ref(item).cast::<i8>()) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (items, at);
}
