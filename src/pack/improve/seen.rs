//! Bins already weighed against the pool as it is, and found to have no trade that helps.
//!
//! A sweep of the search weighs every bin against the pool, and between the trades it makes the
//! pool does not change: on Graphcore's SQuAD histogram most of its 9,867 bins with room hold two
//! or three lengths, and many hold the same ones (a long length alone, the same pair). What
//! weighing finds depends only on the bin's lengths and the pool (where no pool length is tabu
//! in the bin and the cap leaves room for a pair: the fast path of `weigh.rs`), so a bin that
//! holds the same lengths as one weighed since the pool last changed has no helpful trade
//! either, and costs the same work. That work is still counted (the search's budget is in work,
//! so the plans stay the same bit for bit); only weighing it again is skipped.
//!
//! Only outcomes without a helpful trade are kept: they do not depend on the order of the bin's
//! lengths, which decides only between trades that score the same. A bin with no room is not
//! kept either: weighing it stops at the first trade that fills it, so its work depends on that
//! order. Bins are known by their lengths' key, which `bins.rs` keeps for bins of a few lengths
//! as they change, so that a sweep past a bin already known reads no more than its run.

use crate::alloc::try_vec;
use crate::error::Result;

/// Entries of the table (a power of two); a bin whose entry another took is weighed again.
const ENTRIES: usize = 1 << 12;

#[derive(Clone, Copy, Default)]
struct Entry {
    /// The key of the bin's lengths (`bins.rs`; 0: no entry).
    key: u64,
    /// The pool's version when it was weighed, and the work it cost.
    pool: u32,
    work: u32,
}

/// What weighing found, for bins of a few lengths, against the pool's present version only.
pub(super) struct Seen {
    entries: Vec<Entry>,
}

impl Seen {
    pub fn new() -> Result<Self> {
        Ok(Seen {
            entries: try_vec("the bins weighed", ENTRIES, Entry::default())?,
        })
    }

    /// The work of weighing a bin of `key` against pool version `pool`, if one was weighed and
    /// found no helpful trade.
    #[inline]
    pub fn unhelpful(&self, key: u64, pool: u32) -> Option<u64> {
        let entry = self.entries[slot(key)];
        (entry.key == key && entry.pool == pool).then_some(u64::from(entry.work))
    }

    /// A bin of `key`, weighed against pool version `pool` in `work`, has no helpful trade.
    #[inline]
    pub fn keep(&mut self, key: u64, pool: u32, work: u64) {
        if let Ok(work) = u32::try_from(work) {
            self.entries[slot(key)] = Entry { key, pool, work };
        }
    }
}

/// Fibonacci hashing: the key's high bits, mixed, pick the entry.
#[inline]
fn slot(key: u64) -> usize {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - ENTRIES.trailing_zeros())) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bin_is_known_by_its_key_and_the_pools_version() {
        let mut seen = Seen::new().unwrap();
        let key = 1 << 60 | 5 << 30 | 17 << 15 | 300;
        assert_eq!(seen.unhelpful(key, 3), None);
        seen.keep(key, 3, 41);
        assert_eq!(seen.unhelpful(key, 3), Some(41));
        assert_eq!(seen.unhelpful(key, 4), None);
        assert_eq!(seen.unhelpful(key + 1, 3), None);
    }
}
