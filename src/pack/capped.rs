//! The fullest fill of a block's room from at most a given number of the remaining lengths: the
//! subset sum of `best_fit.rs` with the lengths counted, for the `max_pieces` cap.
//!
//! One bitset of reachable sums per number of lengths used (`layers[c]`: sums of exactly `c`
//! lengths), so a search costs (lengths below the room) x (lengths allowed) x (room / 64) word
//! operations, counted against the same work allowance as the uncapped searches.

use super::{LengthPool, FILL, MAX_SEARCH_ROOM};
use crate::alloc::{try_push, try_vec};
use crate::error::Result;

/// A search keeps a length per (lengths used, sum): past this many entries it is not made, and
/// the block keeps its greedy fill.
const MAX_ENTRIES: usize = 1 << 22;

pub(super) struct CappedSum {
    /// `layers[c * words..(c + 1) * words]`, bit `s`: some `c` remaining lengths sum to `s`.
    layers: Vec<u64>,
    /// `last_length[c * (room + 1) + s]`: the length whose copy first made `s` reachable with
    /// `c` lengths; `s - it` is then reachable with `c - 1`.
    last_length: Vec<u32>,
    /// `ceiling[room]`: the fullest fill of `room` that the last search of a whole block's room
    /// (with the block's whole allowance of lengths) found. Lengths only ever leave the pool,
    /// so no later fill of that room can do better.
    pub(super) ceiling: Vec<u32>,
}

impl CappedSum {
    pub(super) fn new(t_max: u32) -> Result<Self> {
        let mut ceiling = try_vec("the fullest fill of each room", t_max as usize + 1, 0)?;
        for (room, ceiling) in (0..).zip(ceiling.iter_mut()) {
            *ceiling = room;
        }
        Ok(CappedSum {
            layers: Vec::new(),
            last_length: Vec::new(),
            ceiling,
        })
    }

    /// Takes from `pool` the lengths, at most `allowed` of them, with the largest sum at most
    /// `room`, writes them to `fill` and returns their sum; `None` (and nothing taken) where the
    /// search would be too large. `whole` says that `room` is a whole block's room with the
    /// block's whole allowance, which the ceiling remembers.
    pub(super) fn fullest_fill(
        &mut self,
        pool: &mut LengthPool,
        room: u32,
        allowed: u32,
        whole: bool,
        work_left: &mut u64,
        fill: &mut Vec<u32>,
    ) -> Result<Option<u32>> {
        let layers = allowed.min(room) as usize;
        let width = room as usize + 1;
        let words = room as usize / 64 + 1;
        if (layers + 1) * width > MAX_ENTRIES {
            return Ok(None);
        }
        if self.layers.len() < (layers + 1) * words {
            self.layers = try_vec("the reachable sums", (layers + 1) * words, 0)?;
        }
        if self.last_length.len() < (layers + 1) * width {
            self.last_length = try_vec("the last length of each sum", (layers + 1) * width, 0)?;
        }
        let bits = &mut self.layers[..(layers + 1) * words];
        bits.fill(0);
        bits[0] = 1;
        let last_length = &mut self.last_length;
        let reached = |bits: &[u64]| {
            (0..=layers).any(|c| bits[c * words + room as usize / 64] >> (room % 64) & 1 == 1)
        };
        let mut next = pool.longest_at_most(room);
        while let Some(length) = next {
            // A length with enough copies for any sum may be added again within one pass,
            // layer after layer upwards; one with fewer gets a pass per copy, downwards, so
            // that each pass adds at most one copy.
            let most_used = (layers as u32).min(room / length);
            let copies = pool.count(length);
            let (passes, upwards) = if copies >= most_used {
                (1, true)
            } else {
                (copies, false)
            };
            for _ in 0..passes {
                for step in 0..layers {
                    let c = if upwards { step + 1 } else { layers - step };
                    let (below, above) = bits.split_at_mut(c * words);
                    let source = &below[(c - 1) * words..];
                    let target = &mut above[..words];
                    let shift = length as usize;
                    shift_into(source, target, shift, room as usize, |sum| {
                        last_length[c * width + sum] = length
                    });
                    *work_left = work_left.saturating_sub((words - shift / 64) as u64);
                }
            }
            if reached(bits) {
                break;
            }
            next = pool.longest_at_most(length - 1);
        }
        // The fullest sum, from the fewest lengths that reach it.
        let (mut best, mut used) = (0, 0);
        for c in 0..=layers {
            let layer = &bits[c * words..(c + 1) * words];
            if let Some(word) = layer.iter().rposition(|&w| w != 0) {
                let top = word * 64 + 63 - layer[word].leading_zeros() as usize;
                if top > best {
                    (best, used) = (top, c);
                }
            }
        }
        if whole {
            self.ceiling[room as usize] = best as u32;
        }
        fill.clear();
        let mut sum = best;
        for c in (1..=used).rev() {
            let length = self.last_length[c * width + sum];
            pool.take(length);
            try_push(fill, "the lengths of a block", length)?;
            sum -= length as usize;
        }
        debug_assert_eq!(sum, 0);
        Ok(Some(best as u32))
    }
}

/// The greedy `fill` of a block's `room` with at most `slots` lengths, `left` short of it, made
/// as full as a search with the lengths counted finds: the greedy picks are given back latest
/// first (all of them while the room stays within MAX_SEARCH_ROOM) and what they leave open is
/// searched with the slots they leave.
#[allow(clippy::too_many_arguments)]
pub(super) fn capped_fill(
    capped: &mut CappedSum,
    pool: &mut LengthPool,
    room: u32,
    left: u32,
    slots: usize,
    work_left: &mut u64,
    fill: &mut Vec<u32>,
    tail: &mut Vec<u32>,
) -> Result<()> {
    let whole = room <= MAX_SEARCH_ROOM;
    if whole && room - left >= capped.ceiling[room as usize] {
        // An earlier search of this room found no fuller fill.
        return Ok(());
    }
    let (mut kept, mut open) = (fill.len(), left);
    while kept > 0 && open + fill[kept - 1] <= MAX_SEARCH_ROOM {
        kept -= 1;
        pool.put_back(fill[kept]);
        open += fill[kept];
    }
    let allowed = (slots - kept) as u32;
    let found = if allowed > 0 {
        capped.fullest_fill(pool, open, allowed, whole && kept == 0, work_left, tail)?
    } else {
        None
    };
    match found {
        // The picks given back are one fill the search weighed: what it found is as full.
        Some(_) => {
            fill.truncate(kept);
            for &length in tail.iter() {
                try_push(fill, FILL, length)?;
            }
        }
        // Not searched: the greedy picks stand.
        None => {
            for &length in &fill[kept..] {
                pool.take(length);
            }
        }
    }
    Ok(())
}

/// `target |= source << shift`, keeping no bit above `highest`, calling `first_reached(s)` for
/// every bit `s` of `target` that this sets.
fn shift_into(
    source: &[u64],
    target: &mut [u64],
    shift: usize,
    highest: usize,
    mut first_reached: impl FnMut(usize),
) {
    let (word_shift, bit_shift) = (shift / 64, shift % 64);
    let last = highest / 64;
    let words = target.iter_mut().enumerate().take(last + 1);
    for (word, slot) in words.skip(word_shift) {
        let from = word - word_shift;
        let mut moved = source[from] << bit_shift;
        if bit_shift > 0 && from > 0 {
            moved |= source[from - 1] >> (64 - bit_shift);
        }
        if word == last {
            moved &= u64::MAX >> (63 - highest % 64);
        }
        let mut fresh = moved & !*slot;
        *slot |= moved;
        while fresh != 0 {
            first_reached(word * 64 + fresh.trailing_zeros() as usize);
            fresh &= fresh - 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pack::counts_of;

    fn pool_of(lengths: &[u32], t_max: u32) -> LengthPool {
        LengthPool::new(&counts_of(lengths, t_max)).unwrap()
    }

    #[test]
    fn the_fullest_fill_within_the_allowance() {
        // Room 12 from {5, 4, 4, 4, 3}: 4 + 4 + 4 = 12 with three, 5 + 4 + 3 = 12 too; with two
        // at most, 5 + 4 = 9 is the fullest.
        let mut search = CappedSum::new(12).unwrap();
        let mut work = u64::MAX;
        let mut fill = Vec::new();
        let mut pool = pool_of(&[5, 4, 4, 4, 3], 12);
        let found = search
            .fullest_fill(&mut pool, 12, 2, true, &mut work, &mut fill)
            .unwrap();
        assert_eq!(found, Some(9));
        fill.sort_unstable();
        assert_eq!(fill, vec![4, 5]);
        assert_eq!(search.ceiling[12], 9);
        let mut pool = pool_of(&[5, 4, 4, 4, 3], 12);
        let found = search
            .fullest_fill(&mut pool, 12, 3, false, &mut work, &mut fill)
            .unwrap();
        assert_eq!(found, Some(12));
        assert_eq!(fill.len(), 3);
        assert_eq!(fill.iter().sum::<u32>(), 12);
    }

    #[test]
    fn copies_are_counted() {
        // Room 9 from {3, 3, 2}: three 3s would be exact, but there are two: 3 + 3 + 2 = 8.
        let mut search = CappedSum::new(9).unwrap();
        let (mut work, mut fill) = (u64::MAX, Vec::new());
        let mut pool = pool_of(&[3, 3, 2], 9);
        let found = search
            .fullest_fill(&mut pool, 9, 3, true, &mut work, &mut fill)
            .unwrap();
        assert_eq!(found, Some(8));
        assert_eq!(pool.count(3) + pool.count(2), 0);
        // Plenty of copies: 3 + 3 + 3.
        let mut pool = pool_of(&[3; 5], 9);
        let found = search
            .fullest_fill(&mut pool, 9, 4, true, &mut work, &mut fill)
            .unwrap();
        assert_eq!((found, fill.len(), pool.count(3)), (Some(9), 3, 2));
    }

    #[test]
    fn shift_into_crosses_words_and_clips() {
        let source = [1u64 | 1 << 63, 0, 0];
        let mut target = [0u64; 3];
        let mut reached = Vec::new();
        shift_into(&source, &mut target, 65, 129, |sum| reached.push(sum));
        assert_eq!(reached, vec![65, 128]);
        reached.clear();
        shift_into(&source, &mut target, 70, 100, |sum| reached.push(sum));
        assert_eq!(reached, vec![70]);
    }
}
