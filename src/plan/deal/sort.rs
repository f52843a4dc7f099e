//! The first steps of a deal: the sequences shuffled, then sorted longest first, stably.

use super::super::scatter::scatter;
use super::{length_of, pair, sequence_of};
use crate::alloc::{
    try_vec, try_with_capacity, try_with_capacity_huge, try_with_capacity_to_scatter,
};
use crate::error::Result;
use crate::rng::PlanRng;

/// What the sorted sequences are called when there is no memory for them.
const SORTED: &str = "the sequences sorted by length";

/// Lengths spanning fewer values than this sort in one counting pass.
const DIGIT: u32 = 1 << 16;

/// The sequences sorted longest first, a buffer of a pair per sequence for what comes next, and
/// the runs of one length in the sorted order, as `(length, sequences)`.
pub(super) struct Sorted {
    pub(super) sorted: Vec<u32>,
    pub(super) spare: Vec<u64>,
    pub(super) runs: Vec<(u32, u32)>,
}

/// The sequences shuffled with `rng`, then sorted longest first, stably; the sorted sequences
/// with room for `room`. `counts[length]`, when not empty, is each length's count (the
/// planner's), which saves a pass over the lengths.
pub(super) fn shuffled_longest_first(
    lengths: &[u32],
    counts: &[u32],
    rng: &mut PlanRng,
    room: usize,
) -> Result<Sorted> {
    let (shortest, longest) = if counts.is_empty() {
        lengths.iter().fold((u32::MAX, 0), |(low, high), &length| {
            (low.min(length), high.max(length))
        })
    } else {
        let present = || (0u32..).zip(counts).filter(|&(_, &count)| count > 0);
        let shortest = present().next().map_or(u32::MAX, |(length, _)| length);
        (shortest, present().last().map_or(0, |(length, _)| length))
    };
    // (No lengths, which planners refuse, make one empty run.)
    let shortest = shortest.min(longest);
    let mut pairs = try_with_capacity_huge("the sequences with their lengths", lengths.len())?;
    pairs.extend(
        (0..)
            .zip(lengths)
            .map(|(sequence, &length)| pair(sequence, length)),
    );
    rng.shuffle_ahead::<AHEAD_ALL>(&mut pairs);
    // Sorted ascending by how much shorter than the longest: longest first.
    let key = |pair: u64| longest - length_of(pair);
    if longest - shortest >= DIGIT {
        return sorted_in_two_digits(pairs, key, room);
    }
    // One counting sort. (Done as the shuffle settles each place, it was slower: the two
    // streams of scattered writes hinder each other.)
    let mut of_key = try_vec(
        "the sequences of each length",
        (longest - shortest) as usize + 1,
        0u32,
    )?;
    if counts.is_empty() {
        for &length in lengths {
            of_key[(longest - length) as usize] += 1;
        }
    } else {
        for (key, count) in of_key.iter_mut().enumerate() {
            *count = counts[longest as usize - key];
        }
    }
    let mut sorted = try_with_capacity_to_scatter(SORTED, room.max(pairs.len()), pairs.len())?;
    let mut starts = try_vec("the first place of each length", of_key.len() + 1, 0u32)?;
    for k in 0..of_key.len() {
        starts[k + 1] = starts[k] + of_key[k];
    }
    let key = |pair| Some(key(pair) as usize);
    scatter(
        &pairs,
        &starts,
        key,
        |_, pair| sequence_of(pair),
        &mut sorted,
    )?;
    let present = (0..of_key.len()).filter(|&k| of_key[k] > 0);
    let mut runs = try_with_capacity("the lengths present", present.clone().count())?;
    runs.extend(present.map(|k| (longest - k as u32, of_key[k])));
    Ok(Sorted {
        sorted,
        spare: pairs,
        runs,
    })
}

/// Lengths over more values than a counting sort's table should hold: a radix sort of two
/// 16-bit digits of `key`, the low one first (the second pass keeps the order of the first
/// within each high digit, which makes the whole sort stable).
fn sorted_in_two_digits(
    mut pairs: Vec<u64>,
    key: impl Fn(u64) -> u32,
    room: usize,
) -> Result<Sorted> {
    let mut by_low = try_vec(SORTED, pairs.len(), 0u64)?;
    counting_pass(&pairs, &mut by_low, |pair| key(pair) % DIGIT)?;
    counting_pass(&by_low, &mut pairs, |pair| key(pair) / DIGIT)?;
    drop(by_low);
    let present = 1 + pairs
        .windows(2)
        .filter(|two| length_of(two[0]) != length_of(two[1]))
        .count();
    let mut runs: Vec<(u32, u32)> = try_with_capacity("the lengths present", present)?;
    let mut sorted = try_with_capacity(SORTED, room.max(pairs.len()))?;
    for &pair in &pairs {
        sorted.push(sequence_of(pair));
        match runs.last_mut() {
            Some((length, count)) if *length == length_of(pair) => *count += 1,
            _ => runs.push((length_of(pair), 1)),
        }
    }
    Ok(Sorted {
        sorted,
        spare: pairs,
        runs,
    })
}

/// A stable counting sort of `items` into `sorted` by `key`, a 16-bit digit.
fn counting_pass(items: &[u64], sorted: &mut [u64], key: impl Fn(u64) -> u32) -> Result<()> {
    let mut next = try_vec("the next place of each digit", DIGIT as usize, 0u32)?;
    for &item in items {
        next[key(item) as usize] += 1;
    }
    let mut start = 0;
    for slot in &mut next {
        (*slot, start) = (start, start + *slot);
    }
    for &item in items {
        let k = key(item) as usize;
        sorted[next[k] as usize] = item;
        next[k] += 1;
    }
    Ok(())
}

/// Items of the shuffle of all the sequences drawn and prefetched before their swap: enough to
/// keep the memory busy (a swap in a large set waits on a read from memory, and the next picks
/// do not depend on it), few enough that the prefetched items are still in the cache when
/// swapped. (Measured on 5M and 50M items: 32 and 128 were no faster at 5M, and slower at 50M.)
pub(super) const AHEAD_ALL: usize = 64;

/// The same for the shuffle of each lane, a 32nd of the sequences here: its items are nearer
/// (a lane fits the last-level cache, if not the second), and more of them in flight pay.
/// Measured with 8 to 256 on 50M sequences in 32 lanes, the lanes' shuffles took 340, 265,
/// 215, 200, 185 and 185 ms (8, 16, 32, 64, 128, 256); on 5M, 15.8 ms with 64 and 14.4 with
/// 256 (BENCHMARKS.md, issue 26, fifth pass).
pub(super) const AHEAD_LANE: usize = 256;
