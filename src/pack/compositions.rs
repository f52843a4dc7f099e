//! Small caps (`max_pieces` 2 and up) packed in length space: which lengths make a block is
//! decided on the counts per length, and a decision is applied to as many blocks as the counts
//! allow at once.
//!
//! Filling each block from its longest length (`best_fit.rs`) takes the longest length that fits
//! the room, so under a cap of 3 most blocks close exactly with two lengths, and the short
//! lengths are left for the end, three to a block far from full (89.5% on Graphcore's Wikipedia
//! histogram). Here a block opened by the longest length takes, for its room, the fullest *pair*
//! of lengths, a single length only where no pair is as full; among the pairs of one sum, the
//! pair whose scarcer length is most plentiful (so no length is used up long before the others
//! and leaves its partners stranded). On that histogram: 99.61%.
//!
//! Every decision is on the counts alone and each one empties a length (or leaves it short of
//! the copies the decision needs), so there are at most about twice as many decisions as distinct
//! lengths. The search for a pair costs (present lengths below half the room) per sum tried and
//! is counted against a work allowance: past it, no packing is made and the caller keeps its own.

use super::{item_count, LengthPool, Packing};
use crate::alloc::try_push;
use crate::error::Result;

/// Work (lengths examined) allowed per length packed, plus a fixed allowance; counted in
/// operations, not time, so the outcome is the same on every machine.
const WORK_PER_LENGTH: u64 = 64;
const WORK_ALLOWANCE: u64 = 1 << 20;

/// A packing with at most `cap` (at least 2) lengths a block, of which at most 3 are used: a
/// block opens with the longest remaining length and takes the fullest single length (cap 2) or
/// pair (cap 3 and up) that fits. `None` where the work allowance ran out.
pub(super) fn by_compositions(counts: &[u32], t_max: u32, cap: u32) -> Result<Option<Packing>> {
    debug_assert!(cap >= 2);
    let items = item_count(counts);
    let mut pool = LengthPool::new(counts)?;
    // Every block holds an item: at most as many blocks as items.
    let mut packing = Packing::for_items(counts, items)?;
    let mut work_left = WORK_ALLOWANCE + WORK_PER_LENGTH * items as u64;
    let mut block: Vec<u32> = Vec::new();
    let mut tally: Vec<(u32, u32)> = Vec::new();
    while let Some(opener) = pool.longest_at_most(t_max) {
        pool.take(opener);
        block.clear();
        try_push(&mut block, "the lengths of a block", opener)?;
        let room = t_max - opener;
        let fill = if cap == 2 {
            pool.longest_at_most(room).map(|length| (length, None))
        } else {
            fullest_pair(&pool, room, &mut work_left)
        };
        if work_left == 0 {
            return Ok(None);
        }
        if let Some((first, second)) = fill {
            pool.take(first);
            try_push(&mut block, "the lengths of a block", first)?;
            if let Some(second) = second {
                pool.take(second);
                try_push(&mut block, "the lengths of a block", second)?;
            }
        }
        // The same decision holds while the counts allow it: emit those copies at once.
        tally.clear();
        for &length in &block {
            match tally.iter_mut().find(|(seen, _)| *seen == length) {
                Some((_, copies)) => *copies += 1,
                None => try_push(&mut tally, "the lengths of a block", (length, 1))?,
            }
        }
        let repeats = tally
            .iter()
            .map(|&(length, copies)| pool.count(length) / copies)
            .min()
            .unwrap_or(0);
        for &(length, copies) in &tally {
            pool.take_many(length, copies * repeats);
        }
        for _ in 0..=repeats {
            packing.lengths.extend_from_slice(&block);
            packing.close_block();
        }
    }
    Ok(Some(packing))
}

/// The fullest fill of `room` by two lengths of `pool`, or by one where no pair is as full: among
/// the pairs of the largest sum, the one whose scarcer length has the most copies (the shorter
/// first on ties). Spends a unit of `work_left` per length examined; at 0, gives up.
fn fullest_pair(pool: &LengthPool, room: u32, work_left: &mut u64) -> Option<(u32, Option<u32>)> {
    let shortest = pool.shortest()?;
    let mut sum = room;
    while sum >= shortest {
        // (plenty, shorter length), best so far.
        let mut best: Option<(u32, u32)> = None;
        let mut next = pool.longest_at_most(sum / 2);
        while let Some(shorter) = next {
            if *work_left == 0 {
                return None;
            }
            *work_left -= 1;
            let longer = sum - shorter;
            let plenty = if shorter == longer {
                pool.count(shorter) / 2
            } else {
                pool.count(shorter).min(pool.count(longer))
            };
            if plenty > 0 && best.is_none_or(|(most, _)| plenty >= most) {
                best = Some((plenty, shorter));
            }
            next = shorter.checked_sub(1).and_then(|l| pool.longest_at_most(l));
        }
        if let Some((_, shorter)) = best {
            return Some((sum - shorter, Some(shorter)));
        }
        if pool.count(sum) > 0 {
            return Some((sum, None));
        }
        // Nothing of this sum: the next fullest is the longest single length below it, or a
        // pair summing to less.
        sum -= 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts_of(lengths: &[u32], t_max: u32) -> Vec<u32> {
        let mut counts = vec![0; t_max as usize + 1];
        for &length in lengths {
            counts[length as usize] += 1;
        }
        counts
    }

    #[test]
    fn a_pair_is_preferred_to_a_single_length_of_the_same_sum() {
        // Blocks of 12, at most 3: the first 8 takes 2 + 2 (not the 4), which leaves the 4 for
        // the second: two blocks. Taking the 4 first would leave {8, 2, 2}... the same here, but
        // a single length never wins a tie with a pair.
        let counts = counts_of(&[8, 8, 4, 2, 2], 12);
        let packing = by_compositions(&counts, 12, 3).unwrap().unwrap();
        let blocks: Vec<&[u32]> = packing.blocks().collect();
        assert_eq!(blocks, vec![&[8, 2, 2][..], &[8, 4][..]]);
    }

    #[test]
    fn copies_of_a_decision_are_emitted_together_and_every_length_once() {
        let lengths = [9, 9, 9, 2, 1, 2, 1, 2, 1, 5, 3, 7];
        let packing = by_compositions(&counts_of(&lengths, 12), 12, 3)
            .unwrap()
            .unwrap();
        let mut packed = packing.lengths.clone();
        packed.sort_unstable();
        let mut expected = lengths.to_vec();
        expected.sort_unstable();
        assert_eq!(packed, expected);
        assert!(packing
            .blocks()
            .all(|block| block.len() <= 3 && block.iter().sum::<u32>() <= 12));
        // 51 steps: 5 blocks of 12 at least; {9,2,1} x3, {7,5}, {3}.
        assert_eq!(packing.ends.len(), 5);
    }

    #[test]
    fn a_cap_of_two_takes_the_longest_partner_that_fits() {
        let packing = by_compositions(&counts_of(&[7, 6, 5, 4, 3], 10), 10, 2)
            .unwrap()
            .unwrap();
        let blocks: Vec<&[u32]> = packing.blocks().collect();
        assert_eq!(blocks, vec![&[7, 3][..], &[6, 4][..], &[5][..]]);
    }
}
