//! Small caps (`max_pieces`) packed in length space: which lengths make a block is decided on
//! the counts per length, and a decision is applied to as many blocks as the counts allow at once.
//!
//! Filling each block from its longest length (`best_fit.rs`) takes the longest length that fits
//! the room, so under a cap of 3 most blocks close exactly with two lengths, and the short
//! lengths are left for the end, three to a block far from full (89.5% on Graphcore's Wikipedia
//! histogram). Here a block opened by the longest length takes, for its room, the fullest *pair*
//! of lengths, a single length only where no pair is as full; among the pairs of one sum, the
//! one whose scarcer length is most plentiful (weighed towards the longer pairs, by one of a few
//! weights: see `WEIGHTS`), so that no length is used up long before its partners. On that
//! histogram: 99.80%.
//!
//! Every decision is on the counts alone and each one empties a length (or leaves it short of
//! the copies the decision needs), so a rule makes at most about twice as many decisions as there
//! are distinct lengths. The search for a pair costs twice the present lengths below half the
//! room, counted against a work allowance: a rule past it is dropped, and with no rule left no
//! packing is made and the caller keeps its own (`best_fit` keeps whichever has fewer blocks).

use super::{item_count, LengthPool, Packing};
use crate::alloc::{try_push, try_with_capacity};
use crate::error::Result;

/// Work (lengths examined) allowed to each rule of the portfolio per length packed, plus a fixed
/// allowance; counted in operations, not time, so the outcome is the same on every machine.
const WORK_PER_LENGTH: u64 = 4;
const WORK_ALLOWANCE: u64 = 1 << 20;

/// The rules tried: a pair's plenty (the copies of its scarcer length) is weighed by its longer
/// length to these powers. Which weight strands the fewest lengths depends on the set (on the
/// Wikipedia histogram at a cap of 3: 99.61%, 99.55%, 99.80%, 99.69%, 99.55%, 99.62%), and a
/// rule costs a few hundred decisions, so all are tried and the one with fewest blocks kept.
const WEIGHTS: std::ops::RangeInclusive<u32> = 0..=5;

/// Under a cap of 4 and more, the rules are tried with blocks of 3 lengths too (the most
/// balanced choice where a pair closes the block) and with blocks of up to this many, the
/// lengths past the opener and before the pair being the shortest remaining: with many short
/// lengths (the Action-Genome-shaped set at a cap of 4), every block must take its share of
/// them. Past 8, blocks fill from their longest length (`best_fit.rs`) as well as this would.
const MOST_PIECES: usize = 8;

/// One decision: `copies` blocks of the same lengths (`lengths[..pieces]`).
#[derive(Clone, Copy)]
struct Composition {
    copies: u32,
    pieces: u8,
    lengths: [u32; MOST_PIECES],
}

/// A packing with at most `cap` (at least 2) lengths a block, of which at most 3 are used: a
/// block opens with the longest remaining length and takes the fullest single length (cap 2) or
/// pair (cap 3 and up) that fits. `None` where the work allowance ran out, or where no rule
/// makes fewer than `fewer_than` blocks: the caller's packing is kept then, and this one is
/// never placed (the decisions count the blocks).
pub(super) fn by_compositions(
    counts: &[u32],
    t_max: u32,
    cap: u32,
    fewer_than: u64,
) -> Result<Option<Packing>> {
    debug_assert!(cap >= 2);
    let items = item_count(counts);
    let work = WORK_ALLOWANCE + WORK_PER_LENGTH * items as u64;
    // Under a cap of 2 there is no pair to weigh: one rule.
    let weights = if cap == 2 { 0..=0 } else { WEIGHTS };
    let most = (cap as usize).min(MOST_PIECES);
    let sizes = [most.min(3), most];
    let sizes = if most > 3 { &sizes[..] } else { &sizes[..1] };
    let mut best: Option<(u64, Vec<Composition>)> = None;
    let mut decisions = Vec::new();
    let rules = sizes
        .iter()
        .flat_map(|&size| weights.clone().map(move |w| (size, w)));
    // A size whose rule runs out of work is not tried with other weights (they cost as much).
    let mut exhausted = None;
    for (pieces, weight) in rules {
        if exhausted == Some(pieces) {
            continue;
        }
        if !decide(counts, t_max, pieces, weight, work, &mut decisions)? {
            exhausted = Some(pieces);
            continue;
        }
        let blocks = decisions.iter().map(|d| u64::from(d.copies)).sum();
        if best.as_ref().is_none_or(|(fewest, _)| blocks < *fewest) {
            let mut kept = try_with_capacity("the blocks decided", decisions.len())?;
            kept.extend_from_slice(&decisions);
            best = Some((blocks, kept));
        }
    }
    let Some((blocks, decisions)) = best.filter(|&(blocks, _)| blocks < fewer_than) else {
        return Ok(None);
    };
    let mut packing = Packing::for_items(counts, blocks as usize)?;
    for decision in &decisions {
        let block = &decision.lengths[..decision.pieces as usize];
        for _ in 0..decision.copies {
            packing.lengths.extend_from_slice(block);
            packing.close_block();
        }
    }
    Ok(Some(packing))
}

/// The decisions of the rule with blocks of at most `pieces` lengths and pairs weighed by
/// `weight`, in `decisions`; false where `work` ran out first.
fn decide(
    counts: &[u32],
    t_max: u32,
    pieces: usize,
    weight: u32,
    work: u64,
    decisions: &mut Vec<Composition>,
) -> Result<bool> {
    decisions.clear();
    let mut pool = LengthPool::new(counts)?;
    let mut work_left = work;
    while let Some(opener) = pool.longest_at_most(t_max) {
        pool.take(opener);
        let mut block = Composition {
            copies: 1,
            pieces: 1,
            lengths: [opener, 0, 0, 0, 0, 0, 0, 0],
        };
        let mut room = t_max - opener;
        // The shortest lengths first, leaving the last two places to a pair.
        for _ in 3..pieces {
            match pool.shortest().filter(|&shortest| shortest <= room) {
                Some(length) => {
                    pool.take(length);
                    block.lengths[block.pieces as usize] = length;
                    block.pieces += 1;
                    room -= length;
                }
                None => break,
            }
        }
        let fill = if pieces == 2 {
            pool.longest_at_most(room).map(|length| (length, None))
        } else {
            fullest_pair(&pool, room, weight, &mut work_left)
        };
        if work_left == 0 {
            return Ok(false);
        }
        if let Some((first, second)) = fill {
            for length in std::iter::once(first).chain(second) {
                pool.take(length);
                block.lengths[block.pieces as usize] = length;
                block.pieces += 1;
            }
        }
        // The same decision holds while the counts allow it: as many copies as they give.
        let lengths = &block.lengths[..block.pieces as usize];
        let repeats = lengths
            .iter()
            .map(|&length| {
                let copies = lengths.iter().filter(|&&other| other == length).count() as u32;
                pool.count(length) / copies
            })
            .min()
            .unwrap_or(0);
        for &length in lengths {
            pool.take_many(length, repeats);
        }
        block.copies += repeats;
        try_push(decisions, "the blocks decided", block)?;
    }
    Ok(true)
}

/// The fullest fill of `room` by two lengths of `pool`, or by one where no pair is as full: among
/// the pairs of the largest sum, the one whose scarcer length has the most copies, weighed by
/// the longer length to the power `weight` (the shorter pair on ties). Spends a unit of
/// `work_left` per length examined (twice: for the fullest sum, then for its pairs); at 0,
/// gives up.
fn fullest_pair(
    pool: &LengthPool,
    room: u32,
    weight: u32,
    work_left: &mut u64,
) -> Option<(u32, Option<u32>)> {
    let mut spend = || {
        let spent = *work_left > 0;
        *work_left = work_left.saturating_sub(1);
        spent
    };
    // The fullest pair: for each shorter length, the longest partner that fits with it.
    let mut pair_sum = 0;
    let mut next = pool.longest_at_most(room / 2);
    while let Some(shorter) = next {
        if !spend() {
            return None;
        }
        let partner = pool.longest_at_most(room - shorter);
        if let Some(longer) = partner.filter(|&l| l > shorter || pool.count(shorter) >= 2) {
            pair_sum = pair_sum.max(shorter + longer);
        }
        next = shorter.checked_sub(1).and_then(|l| pool.longest_at_most(l));
    }
    let single = pool.longest_at_most(room).unwrap_or(0);
    if single > pair_sum {
        return Some((single, None));
    }
    if pair_sum == 0 {
        return None;
    }
    // Among the pairs of that sum, the most plentiful (weighed). Products of integers in f64:
    // the same rounding on every machine.
    let sum = pair_sum;
    let mut best: Option<(f64, u32)> = None;
    let mut next = pool.longest_at_most(sum / 2);
    while let Some(shorter) = next {
        if !spend() {
            return None;
        }
        let longer = sum - shorter;
        let plenty = if shorter == longer {
            pool.count(shorter) / 2
        } else {
            pool.count(shorter).min(pool.count(longer))
        };
        let mut weighed = f64::from(plenty);
        for _ in 0..weight {
            weighed *= f64::from(longer);
        }
        if plenty > 0 && best.is_none_or(|(most, _)| weighed >= most) {
            best = Some((weighed, shorter));
        }
        next = shorter.checked_sub(1).and_then(|l| pool.longest_at_most(l));
    }
    best.map(|(_, shorter)| (sum - shorter, Some(shorter)))
}

/// The fewest blocks `counts` fit in with at most 2 items a block, exactly: the longest
/// remaining length shares a block with the shortest if they fit together, otherwise it cannot
/// share one with anything (the classic matching for two items a bin, optimal by an exchange
/// argument), applied to every copy of a length at once. A true lower bound under a cap of 2,
/// where the general bounds fall far short (on the Wikipedia histogram: 8,139,776 against the
/// 10,099,081 blocks every packing needs).
pub(crate) fn fewest_blocks_of_pairs(counts: &[u32]) -> Result<u64> {
    let t_max = counts.len() - 1;
    let mut left = crate::alloc::try_vec("the items not yet paired", counts.len(), 0u64)?;
    for (left, &count) in left.iter_mut().zip(counts) {
        *left = u64::from(count);
    }
    let (mut shortest, mut longest, mut blocks) = (1, t_max, 0);
    loop {
        while longest > 0 && left[longest] == 0 {
            longest -= 1;
        }
        while shortest < longest && left[shortest] == 0 {
            shortest += 1;
        }
        if longest == 0 {
            return Ok(blocks);
        }
        if shortest == longest {
            // One length left: in pairs if two fit together.
            let copies = left[longest];
            blocks += if 2 * longest <= t_max {
                copies.div_ceil(2)
            } else {
                copies
            };
            left[longest] = 0;
        } else if shortest + longest <= t_max {
            let pairs = left[shortest].min(left[longest]);
            blocks += pairs;
            left[shortest] -= pairs;
            left[longest] -= pairs;
        } else {
            blocks += left[longest];
            left[longest] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pack::counts_of;

    #[test]
    fn a_pair_is_preferred_to_a_single_length_of_the_same_sum() {
        // Blocks of 12, at most 3: the first 8 takes 2 + 2 rather than the 4 (a pair wins a
        // tie with a single length), and the second takes the 4.
        let counts = counts_of(&[8, 8, 4, 2, 2], 12);
        let packing = by_compositions(&counts, 12, 3, u64::MAX).unwrap().unwrap();
        let blocks: Vec<&[u32]> = packing.blocks().collect();
        assert_eq!(blocks, vec![&[8, 2, 2][..], &[8, 4][..]]);
    }

    #[test]
    fn a_packing_with_no_fewer_blocks_than_the_callers_is_not_placed() {
        let counts = counts_of(&[8, 8, 4, 2, 2], 12);
        // Its 2 blocks, against a caller's 2 (kept) and 3 (beaten).
        assert!(by_compositions(&counts, 12, 3, 2).unwrap().is_none());
        let packing = by_compositions(&counts, 12, 3, 3).unwrap().unwrap();
        assert_eq!(packing.ends.len(), 2);
    }

    #[test]
    fn copies_of_a_decision_are_emitted_together_and_every_length_once() {
        let lengths = [9, 9, 9, 2, 1, 2, 1, 2, 1, 5, 3, 7];
        let packing = by_compositions(&counts_of(&lengths, 12), 12, 3, u64::MAX)
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
    fn under_a_cap_of_four_short_lengths_are_shared_out() {
        // Blocks of 10, at most 4. With 3 lengths a block: {7, 2, 1} twice, then the four 1s
        // need two blocks. Taking the shortest before the pair: {7, 1, 1, 1} twice and {2, 2}.
        let counts = counts_of(&[7, 7, 2, 2, 1, 1, 1, 1, 1, 1], 10);
        let packing = by_compositions(&counts, 10, 4, u64::MAX).unwrap().unwrap();
        let blocks: Vec<&[u32]> = packing.blocks().collect();
        assert_eq!(
            blocks,
            vec![&[7, 1, 1, 1][..], &[7, 1, 1, 1][..], &[2, 2][..]]
        );
        // Under a cap of 3 only the first rule is open to it.
        let packing = by_compositions(&counts, 10, 3, u64::MAX).unwrap().unwrap();
        assert_eq!(packing.ends.len(), 4);
    }

    #[test]
    fn pairs_are_counted_exactly() {
        // Blocks of 10: {9}, {8, 2}, {7, 3}, {6, 4}, {5, 5}, {5}: 6.
        let counts = counts_of(&[9, 8, 7, 6, 5, 5, 5, 4, 3, 2], 10);
        assert_eq!(fewest_blocks_of_pairs(&counts).unwrap(), 6);
        let packing = by_compositions(&counts, 10, 2, u64::MAX).unwrap().unwrap();
        assert_eq!(packing.ends.len(), 6);
        // Nothing fits together: one block each.
        assert_eq!(
            fewest_blocks_of_pairs(&counts_of(&[6, 6, 7], 10)).unwrap(),
            3
        );
        assert_eq!(fewest_blocks_of_pairs(&counts_of(&[], 10)).unwrap(), 0);
    }

    #[test]
    fn every_length_is_packed_once_within_the_cap_and_t_max() {
        // Deterministic pseudo-random sets (an LCG): 400 lengths from 1 to t_max.
        let mut state = 12_345u64;
        let mut next = |below: u32| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            ((state >> 33) % u64::from(below)) as u32
        };
        for t_max in [7, 64, 300] {
            for cap in [2, 3, 4, 5, 9] {
                let mut counts = vec![0; t_max as usize + 1];
                for _ in 0..400 {
                    counts[1 + next(t_max) as usize] += 1;
                }
                let packing = by_compositions(&counts, t_max, cap, u64::MAX)
                    .unwrap()
                    .unwrap();
                let mut packed = vec![0; t_max as usize + 1];
                for block in packing.blocks() {
                    assert!(block.len() <= cap as usize, "{block:?} over {cap}");
                    assert!(block.iter().sum::<u32>() <= t_max, "{block:?} over {t_max}");
                    for &length in block {
                        packed[length as usize] += 1;
                    }
                }
                assert_eq!(packed, counts, "t_max {t_max}, cap {cap}");
                if cap == 2 {
                    let fewest = fewest_blocks_of_pairs(&counts).unwrap();
                    assert_eq!(packing.ends.len() as u64, fewest);
                }
            }
        }
    }

    #[test]
    fn a_cap_of_two_takes_the_longest_partner_that_fits() {
        let packing = by_compositions(&counts_of(&[7, 6, 5, 4, 3], 10), 10, 2, u64::MAX)
            .unwrap()
            .unwrap();
        let blocks: Vec<&[u32]> = packing.blocks().collect();
        assert_eq!(blocks, vec![&[7, 3][..], &[6, 4][..], &[5][..]]);
    }
}
