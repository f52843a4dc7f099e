//! `best_fit`: open each block with the longest remaining length, then fill the rest exactly.
//!
//! Plain best-fit-decreasing leaves a scatter of small gaps that the last, small sequences cannot
//! close (on the Action-Genome-shaped set: 1,796 blocks against a floor of 1,775). Filling each
//! block completely before opening the next keeps the small lengths for the end, where they
//! close the last blocks exactly. The fill is greedy (longest remaining that fits) when that is
//! exact, which it almost always is while many lengths remain; otherwise a bounded subset-sum over
//! the counts per length finds the fullest fill the remaining lengths allow.
//!
//! Where that falls short of the lower bound (when most lengths are a large share of `t_max`,
//! say speech at `t_max` 4096), best-fit decreasing, which weighs every length against all open
//! blocks, may waste less: both run, and the one with fewer blocks is kept.

use super::capped::{capped_fill, CappedSum};
use super::compositions::by_compositions;
use super::{
    best_fit_decreasing, best_fit_decreasing_blocks, improve, item_count,
    most_blocks_closed_when_full, LengthPool, Packing, FILL, MAX_SEARCH_ROOM,
};
use crate::alloc::{try_push, try_vec, try_with_capacity};
use crate::error::Result;

/// Searches of one packing may cost, in all, this many word operations per length packed (plus
/// a fixed allowance), so planning time stays linear in the number of sequences whatever their
/// lengths. Once spent, blocks keep their greedy fill. Counted in operations, not time, so plans
/// stay reproducible. The bundled length sets need a small fraction of it.
const SEARCH_WORK_PER_LENGTH: u64 = 64;
const SEARCH_WORK_ALLOWANCE: u64 = 1 << 20;

/// The `best_fit` policy; `bound` is the fewest blocks any packing of `counts` can have with
/// at most `cap` items a block (`u32::MAX`: no cap).
pub(crate) fn best_fit(counts: &[u32], t_max: u32, cap: u32, bound: u64) -> Result<Packing> {
    let mut filled = fill_blocks(counts, t_max, cap)?;
    // Under a small cap, filling each block from its longest length strands the short ones
    // (see `compositions.rs`); the packing in length space is kept where it has fewer blocks.
    if (2..u32::MAX).contains(&cap) && filled.ends.len() as u64 > bound {
        if let Some(composed) = by_compositions(counts, t_max, cap, filled.ends.len() as u64)? {
            filled = composed;
        }
    }
    if filled.ends.len() as u64 <= bound {
        return Ok(filled);
    }
    // Best-fit decreasing's block count comes cheaply (`decreasing_blocks.rs`); its packing is
    // placed only where it is the better one.
    let better = if best_fit_decreasing_blocks(counts, t_max, cap)? < filled.ends.len() as u64 {
        best_fit_decreasing(counts, t_max, cap)?
    } else {
        filled
    };
    improve(better, t_max, cap, bound)
}

/// Opens each block with the longest remaining length and fills it as fully as the rest allow,
/// with at most `cap` lengths in all.
fn fill_blocks(counts: &[u32], t_max: u32, cap: u32) -> Result<Packing> {
    let mut pool = LengthPool::new(counts)?;
    let blocks = most_blocks_closed_when_full(counts, t_max, cap);
    let mut packing = Packing::for_items(counts, blocks)?;
    // Lengths a block takes besides its opener.
    let slots = cap as usize - 1;
    let mut capped = if cap == u32::MAX {
        None
    } else {
        Some(CappedSum::new(t_max)?)
    };
    let lengths = item_count(counts) as u64;
    let mut subset_sum = SubsetSum::new(
        t_max,
        SEARCH_WORK_ALLOWANCE + SEARCH_WORK_PER_LENGTH * lengths,
    )?;
    // Scratch of one block at a time (its fill, a search's fill, the lengths in the block): a
    // block's items, small next to the packing, but as many as `t_max` (grown fallibly).
    let mut fill = Vec::new();
    let mut tail = Vec::new();
    let mut tally = Vec::new();
    while let Some(opener) = pool.longest_at_most(t_max) {
        pool.take(opener);
        packing.lengths.push(opener);
        let room = t_max - opener;

        fill.clear();
        let mut left = room;
        while fill.len() < slots {
            let Some(length) = pool.longest_at_most(left) else {
                break;
            };
            pool.take(length);
            try_push(&mut fill, FILL, length)?;
            left -= length;
        }
        if let Some(capped) = &mut capped {
            if left > 0 && slots > 0 && subset_sum.work_left > 0 {
                capped_fill(
                    capped,
                    &mut pool,
                    room,
                    left,
                    slots,
                    &mut subset_sum.work_left,
                    &mut fill,
                    &mut tail,
                )?;
            }
        } else if left > 0
            && room - left < subset_sum.ceiling[room as usize]
            && subset_sum.work_left > 0
        {
            // Greedy fell short, and an earlier search does not rule out doing better. Give the
            // greedy picks back one at a time, latest first, and search for an exact fill of what
            // is open: small searches first, the whole room (the best fill there is) last, as
            // long as the room searched stays within MAX_SEARCH_ROOM.
            let mut kept = fill.len();
            let mut open = left;
            loop {
                // The last search: the whole room, or as much of it as stays cheap to search.
                let last = kept == 0 || open + fill[kept - 1] > MAX_SEARCH_ROOM;
                if subset_sum.ceiling[open as usize] == open || last {
                    let found = subset_sum.fullest_fill(&mut pool, open, &mut tail)?;
                    if found == open || last {
                        fill.truncate(kept);
                        for &length in &tail {
                            try_push(&mut fill, FILL, length)?;
                        }
                        break;
                    }
                    for &length in &tail {
                        pool.put_back(length);
                    }
                }
                kept -= 1;
                pool.put_back(fill[kept]);
                open += fill[kept];
            }
        }
        packing.lengths.extend_from_slice(&fill);
        packing.close_block();

        // While lengths remain plentiful, the next blocks would repeat this one: the opener is
        // still the longest, greedy meets the same lengths, and an exact fill cannot be beaten.
        // Emit those copies at once instead of searching again.
        if fill.iter().sum::<u32>() == room {
            let block_start = packing.lengths.len() - fill.len() - 1;
            let repeats = repeats_available(&pool, &packing.lengths[block_start..], &mut tally)?;
            packing.repeat_last_block(repeats);
            for &(length, copies) in &tally {
                pool.take_many(length, copies * repeats);
            }
        }
    }
    debug_assert!(pool.is_empty());
    Ok(packing)
}

/// How many more copies of `block` the pool can give; `tally` is left holding each length of the
/// block with its number of copies in it.
fn repeats_available(pool: &LengthPool, block: &[u32], tally: &mut Vec<(u32, u32)>) -> Result<u32> {
    tally.clear();
    for &length in block {
        match tally.iter_mut().find(|(seen, _)| *seen == length) {
            Some((_, copies)) => *copies += 1,
            None => try_push(tally, "the lengths of a block", (length, 1))?,
        }
    }
    Ok(tally
        .iter()
        .map(|&(length, copies)| pool.count(length) / copies)
        .min()
        .unwrap_or(0))
}

/// Scratch space of the bounded subset-sum, kept across blocks.
struct SubsetSum {
    /// Bit `s` set: some multiset of the remaining lengths sums to `s`.
    reachable: Vec<u64>,
    /// `last_length[s]`: the length whose copies first made `s` reachable; walking `s -=
    /// last_length[s]` down to 0 spells out one multiset that sums to `s`.
    last_length: Vec<u32>,
    /// `ceiling[room]`: the fullest fill of `room` found by the last search at that room. Lengths
    /// only ever leave the pool, so no later fill of that room can do better: a greedy fill that
    /// reaches it needs no search.
    ceiling: Vec<u32>,
    /// Word operations the searches may still spend.
    work_left: u64,
}

impl SubsetSum {
    fn new(t_max: u32, work: u64) -> Result<Self> {
        let sums = t_max as usize + 1;
        let mut ceiling = try_with_capacity("the fullest fill of each room", sums)?;
        ceiling.extend(0..=t_max);
        Ok(SubsetSum {
            reachable: try_vec("the reachable sums", sums.div_ceil(64), 0)?,
            last_length: try_vec("the last length of each sum", sums, 0)?,
            ceiling,
            work_left: work,
        })
    }

    /// Takes from `pool` the multiset of lengths with the largest sum at most `room`, writes it
    /// to `fill` and returns its sum. Lengths are tried longest first, and the search stops once
    /// `room` is reached.
    fn fullest_fill(
        &mut self,
        pool: &mut LengthPool,
        room: u32,
        fill: &mut Vec<u32>,
    ) -> Result<u32> {
        let top = room as usize;
        let reachable = &mut self.reachable[..top / 64 + 1];
        reachable.fill(0);
        reachable[0] = 1;
        // No sum above `highest` is reachable yet, so shifts need not touch the words above it.
        let mut highest = 0;
        let mut next = pool.longest_at_most(room);
        while let Some(length) = next {
            // All multiples 0..=copies of `length`, in chunks 1, 2, 4, ... (binary splitting).
            let mut copies = pool.count(length).min(room / length);
            let mut chunk = 1;
            while copies > 0 {
                let take = chunk.min(copies);
                let shift = (take * length) as usize;
                highest = (highest + shift).min(top);
                shift_or(reachable, shift, highest, |sum| {
                    self.last_length[sum] = length
                });
                let words = (highest / 64 + 1 - shift / 64) as u64;
                self.work_left = self.work_left.saturating_sub(words);
                copies -= take;
                chunk *= 2;
            }
            if reachable[top / 64] >> (top % 64) & 1 == 1 {
                break;
            }
            next = pool.longest_at_most(length - 1);
        }
        let best = highest_set_bit(reachable);
        self.ceiling[top] = best as u32;
        fill.clear();
        let mut sum = best;
        while sum > 0 {
            let length = self.last_length[sum];
            pool.take(length);
            try_push(fill, FILL, length)?;
            sum -= length as usize;
        }
        Ok(best as u32)
    }
}

/// `bits |= bits << shift`, where no bit above `highest` can end up set (and none is kept), calling
/// `first_reached(s)` for every bit `s` that this sets.
fn shift_or(bits: &mut [u64], shift: usize, highest: usize, mut first_reached: impl FnMut(usize)) {
    let (word_shift, bit_shift) = (shift / 64, shift % 64);
    let last = highest / 64;
    // Downwards, so every source word is read before it is written.
    for word in (word_shift..=last).rev() {
        let source = word - word_shift;
        let mut moved = bits[source] << bit_shift;
        if bit_shift > 0 && source > 0 {
            moved |= bits[source - 1] >> (64 - bit_shift);
        }
        if word == last {
            moved &= u64::MAX >> (63 - highest % 64);
        }
        let mut fresh = moved & !bits[word];
        bits[word] |= moved;
        while fresh != 0 {
            first_reached(word * 64 + fresh.trailing_zeros() as usize);
            fresh &= fresh - 1;
        }
    }
}

fn highest_set_bit(bits: &[u64]) -> usize {
    let word = bits
        .iter()
        .rposition(|&w| w != 0)
        .expect("bit 0 is always set");
    word * 64 + 63 - bits[word].leading_zeros() as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pack::counts_of;

    #[test]
    fn subset_sum_finds_the_exact_fill_greedy_misses() {
        // Room 10 from {6, 5, 5}: greedy takes 6 and is stuck at 4 short; 5 + 5 is exact.
        let mut pool = LengthPool::new(&counts_of(&[6, 5, 5], 10)).unwrap();
        let mut search = SubsetSum::new(10, u64::MAX).unwrap();
        let mut fill = Vec::new();
        search.fullest_fill(&mut pool, 10, &mut fill).unwrap();
        fill.sort_unstable();
        assert_eq!(fill, vec![5, 5]);
        assert_eq!(pool.count(6), 1);
        assert_eq!(pool.count(5), 0);
    }

    #[test]
    fn subset_sum_respects_counts_and_falls_short_when_it_must() {
        // Room 13 from {4, 4, 4} and {9}: 9 + 4 = 13 is exact; three 4s would only give 12.
        let mut pool = LengthPool::new(&counts_of(&[4, 4, 4, 9], 13)).unwrap();
        let mut search = SubsetSum::new(13, u64::MAX).unwrap();
        let mut fill = Vec::new();
        search.fullest_fill(&mut pool, 13, &mut fill).unwrap();
        assert_eq!(fill.iter().sum::<u32>(), 13);
        // Room 13 from {4, 4}: 8 is the best; the ceiling remembers it.
        let mut pool = LengthPool::new(&counts_of(&[4, 4], 13)).unwrap();
        search.fullest_fill(&mut pool, 13, &mut fill).unwrap();
        assert_eq!(fill, vec![4, 4]);
        assert_eq!(search.ceiling[13], 8);
    }

    #[test]
    fn shift_or_crosses_words_clips_and_reports_new_sums() {
        let mut bits = vec![1u64, 0, 0];
        let mut reached = Vec::new();
        shift_or(&mut bits, 70, 70, |sum| reached.push(sum));
        assert_eq!(
            (bits.clone(), reached.clone()),
            (vec![1, 1 << 6, 0], vec![70])
        );
        // 0 + 100 is new; 70 + 100 = 170 is above the highest kept (150).
        reached.clear();
        shift_or(&mut bits, 100, 150, |sum| reached.push(sum));
        assert_eq!(
            (bits.clone(), reached.clone()),
            (vec![1, 1 << 6 | 1 << 36, 0], vec![100])
        );
        reached.clear();
        shift_or(&mut bits, 100, 150, |sum| reached.push(sum));
        assert!(reached.is_empty());
        assert_eq!(highest_set_bit(&bits), 100);
    }

    #[test]
    fn every_block_fits_and_every_length_is_packed_once() {
        let lengths = [7, 3, 3, 9, 1, 10, 2, 5, 5, 6, 4, 8];
        let packing = fill_blocks(&counts_of(&lengths, 10), 10, u32::MAX).unwrap();
        let mut packed: Vec<u32> = packing.lengths.clone();
        packed.sort_unstable();
        let mut expected = lengths.to_vec();
        expected.sort_unstable();
        assert_eq!(packed, expected);
        assert!(packing.blocks().all(|b| b.iter().sum::<u32>() <= 10));
        // 63 steps in blocks of 10: 7 blocks is the floor, and best_fit reaches it.
        assert_eq!(packing.ends.len(), 7);
    }

    #[test]
    fn capped_blocks_search_within_their_slots() {
        // Blocks of 18, at most 4 lengths: 8 opens, greedy takes 5 + 4 (9 of the room of 10)
        // and nothing fits the last step; the search with 3 slots finds 4 + 3 + 3.
        let packing = fill_blocks(&counts_of(&[8, 5, 4, 3, 3], 18), 18, 4).unwrap();
        let first = packing.blocks().next().unwrap();
        assert_eq!(
            (first.iter().sum::<u32>(), first.len()),
            (18, 4),
            "{first:?}"
        );
        // Blocks of 12, at most 3 lengths: {6, 4, 2} and {4, 2, 2}.
        let counts = counts_of(&[6, 4, 4, 2, 2, 2], 12);
        let packing = best_fit(&counts, 12, 3, 2).unwrap();
        assert_eq!(packing.ends.len(), 2);
        assert!(packing.blocks().all(|block| block.len() <= 3));
    }
}
