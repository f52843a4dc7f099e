//! Packing on lengths alone: which lengths share a block. Which *sequence* of each length fills a
//! slot is decided afterwards (see `plan/identities.rs`), so the packers work on counts per
//! length, which is what keeps them fast on millions of sequences.

mod best_fit;
mod capped;
mod compositions;
mod decreasing;
mod decreasing_blocks;
mod improve;
mod random_fill;
mod runs;

pub(crate) use best_fit::best_fit;
pub(crate) use compositions::fewest_blocks_of_pairs;
pub(crate) use decreasing::best_fit_decreasing;
pub(crate) use decreasing_blocks::best_fit_decreasing_blocks;
pub(crate) use improve::improve;
pub(crate) use random_fill::random_fill;
pub(crate) use runs::BlockRuns;

use crate::alloc::{try_vec, try_with_capacity_huge};
use crate::error::Result;

/// The fills (`best_fit.rs`, `capped.rs`): searches cost about (lengths below the room) x
/// (room / 64) word operations; beyond this room, giving back more greedy picks is not worth it.
/// Blocks of up to this many steps always get the fullest fill the remaining lengths allow.
const MAX_SEARCH_ROOM: u32 = 4096;

/// What the scratch of a block's lengths is called when there is no memory for it.
const FILL: &str = "the lengths of a block";

/// Blocks as runs of lengths: block `k` holds `lengths[ends[k - 1]..ends[k]]` (from 0 for `k = 0`).
#[derive(Debug, Default)]
pub(crate) struct Packing {
    pub lengths: Vec<u32>,
    pub ends: Vec<u32>,
}

impl Packing {
    /// Room for every item of `counts` in at most `blocks` blocks: sized up front, a packer
    /// never reallocates.
    fn for_items(counts: &[u32], blocks: usize) -> Result<Self> {
        Ok(Packing {
            lengths: try_with_capacity_huge("the packed lengths", item_count(counts))?,
            ends: try_with_capacity_huge("the ends of the packed blocks", blocks)?,
        })
    }

    fn close_block(&mut self) {
        debug_assert!(
            self.ends.len() < self.ends.capacity(),
            "blocks sized up front"
        );
        self.ends.push(self.lengths.len() as u32);
    }

    /// The last block closed, `repeats` times more. The copies are made a run of blocks at a
    /// time, doubling, and their ends written in one loop: on Graphcore's Wikipedia histogram
    /// the fill repeats 8M blocks of two or three lengths, and a copy and a push per block took
    /// most of its time.
    fn repeat_last_block(&mut self, repeats: u32) {
        let end = self.lengths.len();
        let start = self
            .ends
            .len()
            .checked_sub(2)
            .map_or(0, |k| self.ends[k] as usize);
        let size = end - start;
        debug_assert!(
            self.ends.len() + repeats as usize <= self.ends.capacity()
                && end + size * repeats as usize <= self.lengths.capacity(),
            "blocks sized up front"
        );
        // `lengths[start..]` is the block over and over: copying its first `copied` steps
        // (whole blocks) after it doubles it.
        let target = end + size * repeats as usize;
        while self.lengths.len() < target {
            let copied = self.lengths.len() - start;
            let more = copied.min(target - self.lengths.len());
            self.lengths.extend_from_within(start..start + more);
        }
        self.ends
            .extend((1..=repeats as usize).map(|k| (end + k * size) as u32));
    }

    /// The packing of these blocks, in order (for tests).
    #[cfg(test)]
    pub fn of_blocks(blocks: &[&[u32]]) -> Packing {
        let mut packing = Packing::default();
        for block in blocks {
            packing.lengths.extend_from_slice(block);
            packing.ends.push(packing.lengths.len() as u32);
        }
        packing
    }

    #[cfg(test)]
    pub fn blocks(&self) -> impl Iterator<Item = &[u32]> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter().copied())
            .map(|(start, end)| &self.lengths[start as usize..end as usize])
    }
}

/// Items of all lengths.
fn item_count(counts: &[u32]) -> usize {
    counts.iter().map(|&count| count as usize).sum()
}

/// The most blocks a packing of `counts` can have when it closes a block only once no remaining
/// item fits in it or it holds `cap` items (as `best_fit`'s fill and `random_fill` do). A block
/// closed for want of a fitting item and the next hold more than `t_max` steps together (the
/// next one's first item did not fit), so `m` such blocks hold at least `floor(m / 2) * (t_max +
/// 1)` steps; at most `items / cap` blocks are closed full of items; no block is without an item.
fn most_blocks_closed_when_full(counts: &[u32], t_max: u32, cap: u32) -> usize {
    let steps: u64 = (0..)
        .zip(counts)
        .map(|(length, &count)| length * u64::from(count))
        .sum();
    let items = item_count(counts);
    let bound = 2 * (steps / (u64::from(t_max) + 1)) + 1 + items as u64 / u64::from(cap);
    usize::try_from(bound).map_or(usize::MAX, |bound| bound.min(items))
}

/// Every item in a block of its own (the `pad_to_max` baseline), longest first.
pub(crate) fn one_per_block(counts: &[u32]) -> Result<Packing> {
    let mut packing = Packing::for_items(counts, item_count(counts))?;
    for (length, &count) in (0..counts.len() as u32).zip(counts).rev() {
        for _ in 0..count {
            packing.lengths.push(length);
            packing.close_block();
        }
    }
    Ok(packing)
}

/// How many items of each length (1..=t_max) remain, with a two-level bitset of the non-empty
/// lengths so that "the longest remaining length at most r" takes a couple of word scans even
/// when long runs of lengths are used up.
pub(crate) struct LengthPool {
    counts: Vec<u32>,
    /// Bit `len % 64` of word `len / 64`: some item of length `len` remains.
    nonempty: Vec<u64>,
    /// Bit `w % 64` of word `w / 64`: `nonempty[w]` is not zero.
    nonempty_words: Vec<u64>,
    remaining: u64,
}

impl LengthPool {
    /// `counts[len]` items of each length; index 0 must be 0.
    pub fn new(counts: &[u32]) -> Result<Self> {
        debug_assert_eq!(counts[0], 0);
        let mut pool = LengthPool::empty(counts.len() - 1)?;
        for (length, &count) in (0..).zip(counts) {
            if count > 0 {
                pool.put_back_many(length, count);
            }
        }
        Ok(pool)
    }

    /// No item yet, of lengths up to `longest`.
    pub fn empty(longest: usize) -> Result<Self> {
        let words = (longest + 1).div_ceil(64);
        Ok(LengthPool {
            counts: try_vec("the pool of lengths", longest + 1, 0)?,
            nonempty: try_vec("the pool's lengths in use", words, 0)?,
            nonempty_words: try_vec("the pool's words in use", words.div_ceil(64), 0)?,
            remaining: 0,
        })
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
        let word = limit / 64;
        let bits = self.nonempty[word] & (u64::MAX >> (63 - limit % 64));
        if bits != 0 {
            return Some(highest_bit(word, bits));
        }
        // The highest non-empty word below `word`.
        let below = highest_set_below(&self.nonempty_words, word)?;
        Some(highest_bit(below, self.nonempty[below]))
    }

    /// The shortest remaining length, if any.
    pub fn shortest(&self) -> Option<u32> {
        let word = self.nonempty_words.iter().position(|&bits| bits != 0)?;
        let word = word * 64 + self.nonempty_words[word].trailing_zeros() as usize;
        Some((word * 64 + self.nonempty[word].trailing_zeros() as usize) as u32)
    }

    pub fn take(&mut self, length: u32) {
        self.take_many(length, 1);
    }

    pub fn take_many(&mut self, length: u32, copies: u32) {
        let length = length as usize;
        debug_assert!(self.counts[length] >= copies);
        self.counts[length] -= copies;
        self.remaining -= u64::from(copies);
        if self.counts[length] == 0 {
            let word = length / 64;
            self.nonempty[word] &= !(1 << (length % 64));
            if self.nonempty[word] == 0 {
                self.nonempty_words[word / 64] &= !(1 << (word % 64));
            }
        }
    }

    pub fn put_back(&mut self, length: u32) {
        self.put_back_many(length, 1);
    }

    pub fn put_back_many(&mut self, length: u32, copies: u32) {
        let length = length as usize;
        self.counts[length] += copies;
        self.remaining += u64::from(copies);
        let word = length / 64;
        self.nonempty[word] |= 1 << (length % 64);
        self.nonempty_words[word / 64] |= 1 << (word % 64);
    }
}

fn highest_bit(word: usize, bits: u64) -> u32 {
    (word * 64 + 63 - bits.leading_zeros() as usize) as u32
}

/// The highest set bit of `bits` strictly below bit `position`, if any.
fn highest_set_below(bits: &[u64], position: usize) -> Option<usize> {
    if position == 0 {
        return None;
    }
    let limit = position - 1;
    let mut word = limit / 64;
    let mut masked = bits[word] & (u64::MAX >> (63 - limit % 64));
    loop {
        if masked != 0 {
            return Some(highest_bit(word, masked) as usize);
        }
        if word == 0 {
            return None;
        }
        word -= 1;
        masked = bits[word];
    }
}

/// How many lengths of each value `lengths` holds, indexed by length up to `t_max`: the form the
/// length-space packers' tests give them.
#[cfg(test)]
pub(crate) fn counts_of(lengths: &[u32], t_max: u32) -> Vec<u32> {
    let mut counts = vec![0; t_max as usize + 1];
    for &length in lengths {
        counts[length as usize] += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_block_is_copied_whole_each_time() {
        for (earlier, block, repeats) in [
            (&[][..], &[7u32][..], 0),
            (&[][..], &[7], 5),
            (&[9, 1], &[5, 3, 2], 1),
            (&[9, 1], &[5, 3, 2], 13),
        ] {
            let mut packing = Packing {
                lengths: Vec::with_capacity(20 + block.len() * 14),
                ends: Vec::with_capacity(20),
            };
            for one in [earlier, block] {
                if !one.is_empty() {
                    packing.lengths.extend_from_slice(one);
                    packing.close_block();
                }
            }
            packing.repeat_last_block(repeats);
            let mut expected: Vec<&[u32]> = vec![block; repeats as usize + 1];
            if !earlier.is_empty() {
                expected.insert(0, earlier);
            }
            assert_eq!(packing.blocks().collect::<Vec<_>>(), expected);
        }
    }

    #[test]
    fn longest_at_most_scans_across_words() {
        let mut counts = vec![0u32; 200];
        counts[3] = 1;
        counts[64] = 2;
        counts[130] = 1;
        let mut pool = LengthPool::new(&counts).unwrap();
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
        assert_eq!(pool.shortest(), Some(3));
        pool.take(3);
        assert_eq!(pool.shortest(), Some(64));
    }
}
