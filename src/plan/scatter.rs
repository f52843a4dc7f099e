//! The scatter of a counting sort, shared by the sorts of a plan's sequences by length (which
//! sequence fills each slot, `identities.rs`; the deal of `lanes`, `deal/sort.rs`): each item
//! written once, straight into a vector's room, at the next place of its key's run.
//!
//! Zeroing the places first (as `resize` does) took longer than the scatter saved, since the
//! zeroed lines had left the cache before the scatter wrote them, and each was read back from
//! memory. (Gathering a cache line's worth of each key before writing it out, which makes
//! fewer, whole-line writes, was measured no faster.)

use crate::alloc::try_copy;
use crate::error::Result;
use crate::prefetch::prefetch;

/// Items the scatter looks ahead: it prefetches the place where the item this many further on
/// goes (the next place of its key now; a place or two on by then, in the same line as a rule).
/// Writes that miss the cache hold up every later write, since they are made in order;
/// prefetched, they do not. With the sorted vector's pages backed beforehand (see
/// `try_with_capacity_to_scatter`), the deal's scatter took 16 ms instead of 25 at 5M sequences
/// and 190 instead of 290 at 50M (and 53 to back the pages). Without the backing, at 5M,
/// looking 16, 64, 128 and 256 ahead took 24, 18, 17 and 17.5 ms; at 50M none was faster, as its
/// pages were backed only as they were written (BENCHMARKS.md, issue 26, fifth pass). Which
/// sequence fills each slot, on Graphcore's Wikipedia histogram (16.3M sequences in 512 runs),
/// took 71 ms instead of 112 (zeroed first, and without prefetching).
const SCATTER_AHEAD: usize = 128;

/// `value(item)` of each of `items` whose `key(item)` is `Some(k)` into `sorted` (empty, with
/// room for them), stably in the order of the keys: key `k`'s run is `starts[k]..starts[k + 1]`,
/// and the last of `starts` is the number of items sorted.
pub(super) fn scatter<T: Copy>(
    items: &[T],
    starts: &[u32],
    key: impl Fn(T) -> Option<usize>,
    value: impl Fn(usize, T) -> u32,
    sorted: &mut Vec<u32>,
) -> Result<()> {
    let count = starts.last().map_or(0, |&end| end as usize);
    let mut next = try_copy("the next place of each length", starts)?;
    let places = &mut sorted.spare_capacity_mut()[..count];
    for (at, &item) in items.iter().enumerate() {
        if let Some(&ahead) = items.get(at + SCATTER_AHEAD) {
            if let Some(&place) = key(ahead).and_then(|k| next.get(k)) {
                prefetch(places, place as usize);
            }
        }
        if let Some(k) = key(item) {
            let next = &mut next[k];
            places[*next as usize].write(value(at, item));
            *next += 1;
        }
    }
    // Key `k`'s items were written one after another from its first place: if each key's run
    // ended where the next one's begins, and the first began at 0, every place was written.
    let every_place = starts.first().is_none_or(|&first| first == 0)
        && (0..starts.len().saturating_sub(1)).all(|k| next[k] == starts[k + 1]);
    assert!(
        every_place,
        "the counts of the lengths are those of the lengths sorted"
    );
    // SAFETY: every place up to `count` was written, as just checked.
    unsafe { sorted.set_len(count) };
    Ok(())
}
