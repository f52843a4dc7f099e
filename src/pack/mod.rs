//! Packing on lengths alone: which lengths share a block. Which *sequence* of each length fills a
//! slot is decided afterwards (see `plan.rs`), so the packers work on counts per length, which is
//! what keeps them fast on millions of sequences.

mod best_fit;
mod random_fill;

pub(crate) use best_fit::best_fit;
pub(crate) use random_fill::random_fill;

/// Blocks as runs of lengths: block `k` holds `lengths[ends[k - 1]..ends[k]]` (from 0 for `k = 0`).
#[derive(Debug, Default)]
pub(crate) struct Packing {
    pub lengths: Vec<u32>,
    pub ends: Vec<u32>,
}

impl Packing {
    fn with_capacity(items: usize) -> Self {
        Packing {
            lengths: Vec::with_capacity(items),
            ends: Vec::new(),
        }
    }

    fn close_block(&mut self) {
        self.ends.push(self.lengths.len() as u32);
    }

    pub fn blocks(&self) -> impl Iterator<Item = &[u32]> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter().copied())
            .map(|(start, end)| &self.lengths[start as usize..end as usize])
    }
}

/// How many items of each length (1..=t_max) remain, with a bitset of the non-empty lengths so
/// that "the longest remaining length at most r" costs a few word scans.
pub(crate) struct LengthPool {
    counts: Vec<u32>,
    nonempty: Vec<u64>,
    remaining: u64,
}

impl LengthPool {
    /// `counts[len]` items of each length; index 0 must be 0.
    pub fn new(counts: &[u32]) -> Self {
        debug_assert_eq!(counts[0], 0);
        let mut nonempty = vec![0u64; counts.len().div_ceil(64)];
        for (length, &count) in counts.iter().enumerate() {
            if count > 0 {
                nonempty[length / 64] |= 1 << (length % 64);
            }
        }
        LengthPool {
            counts: counts.to_vec(),
            nonempty,
            remaining: counts.iter().map(|&c| u64::from(c)).sum(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.remaining == 0
    }

    pub fn count(&self, length: u32) -> u32 {
        self.counts[length as usize]
    }

    /// The longest remaining length that is at most `limit`, if any.
    pub fn longest_at_most(&self, limit: u32) -> Option<u32> {
        let limit = (limit as usize).min(self.counts.len() - 1);
        let mut word = limit / 64;
        // Keep bits 0..=limit%64 of the first word.
        let mut bits = self.nonempty[word] & (u64::MAX >> (63 - limit % 64));
        loop {
            if bits != 0 {
                return Some((word * 64 + 63 - bits.leading_zeros() as usize) as u32);
            }
            if word == 0 {
                return None;
            }
            word -= 1;
            bits = self.nonempty[word];
        }
    }

    pub fn take(&mut self, length: u32) {
        let slot = &mut self.counts[length as usize];
        debug_assert!(*slot > 0);
        *slot -= 1;
        self.remaining -= 1;
        if *slot == 0 {
            self.nonempty[length as usize / 64] &= !(1 << (length % 64));
        }
    }

    pub fn put_back(&mut self, length: u32) {
        let slot = &mut self.counts[length as usize];
        *slot += 1;
        self.remaining += 1;
        self.nonempty[length as usize / 64] |= 1 << (length % 64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_at_most_scans_across_words() {
        let mut counts = vec![0u32; 200];
        counts[3] = 1;
        counts[64] = 2;
        counts[130] = 1;
        let mut pool = LengthPool::new(&counts);
        assert_eq!(pool.longest_at_most(199), Some(130));
        assert_eq!(pool.longest_at_most(129), Some(64));
        assert_eq!(pool.longest_at_most(64), Some(64));
        assert_eq!(pool.longest_at_most(63), Some(3));
        assert_eq!(pool.longest_at_most(2), None);
        pool.take(64);
        assert_eq!(pool.longest_at_most(100), Some(64));
        pool.take(64);
        assert_eq!(pool.longest_at_most(100), Some(3));
        pool.put_back(64);
        assert_eq!(pool.longest_at_most(100), Some(64));
        assert_eq!(pool.longest_at_most(5000), Some(130));
    }
}
