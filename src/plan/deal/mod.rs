//! The deal of the `lanes` policy (`lanes.rs`): which lane runs each sequence, and in which order.
//!
//! The rule, which plans are reproducible from (`tests/golden.rs` pins it): the sequences are
//! shuffled, then sorted longest first, stably (equal lengths keep the shuffle's order); each in
//! turn goes to the dealt lane with the fewest steps so far, ties to the lowest; the dealt lanes
//! get shuffled lane numbers; and each lane's sequences are shuffled. All draws come from one
//! ChaCha stream of (seed, epoch), in that order.
//!
//! Done as written, a comparison sort (which reads a length at random for every comparison) and
//! a heap operation per sequence made `lanes` 15x slower than `best_fit`. The same deal is
//! computed here in time linear in the sequences, reading memory in order wherever the rule
//! allows:
//! - Each sequence travels with its length ([`pair`]), so that no pass after the first shuffle
//!   reads a length at random. The shuffles prefetch the items they are about to swap.
//! - The sort is a counting sort on the length (two 16-bit digits, least significant first, when
//!   the lengths span more than 2^16 values), stable like the sort it stands for.
//! - The sequences of one length `L` are dealt together. A lane of `q L + r` steps (`r < L`)
//!   takes its `j`-th of them at the heap's key `(q L + r + j L, lane)`, which orders as
//!   `(q + j, r, lane)`: the run is dealt in rounds, round `p` to the lanes with `q <= p` in the
//!   order of `(r, lane)`. Until a lane more than one round ahead of the lightest joins, each
//!   round is one list of lanes, written out without a heap. Where that saves nothing (a run
//!   shorter than the lanes, or lanes far apart), the heap deals one sequence at a time. Both
//!   make the heap's own choices, so the deal is the same; `tests.rs` checks it against the rule
//!   as written.
//!
//! What the rule still costs beyond `best_fit`'s packing: two shuffles of every sequence (all of
//! them, then each lane's), of which the first swaps across the whole set and so waits on
//! memory, and a pass more over the sequences to place them in their lanes.
//!
//! The files: this one deals and places; `sort.rs` shuffles every sequence (with
//! `PlanRng::shuffle_ahead`, as the lanes are) and sorts them; `rounds.rs` deals one length's run.

mod rounds;
mod sort;
#[cfg(test)]
mod tests;

use crate::alloc::{try_vec, try_with_capacity};
use crate::error::Result;
use crate::prefetch::prefetch;
use crate::rng::{PlanRng, Stream};
use rounds::Dealer;
use sort::{shuffled_longest_first, Sorted, AHEAD_LANE};

/// The sequences of every lane, end to end: lane `l` is `order[starts[l]..starts[l + 1]]`, and
/// holds `steps[l]` steps. Each sequence is kept with its length, as `length << 32 | sequence`
/// (see [`pair`]). `spare` is an empty vector with room for the `room` `u32`s [`deal`] was asked
/// for, a sequence's worth of whose pages the deal has touched: the plan's pieces, written next,
/// take it over without copying it.
pub(super) struct Deal {
    pub(super) order: Vec<u64>,
    pub(super) starts: Vec<usize>,
    pub(super) steps: Vec<u64>,
    pub(super) spare: Vec<u32>,
}

/// A sequence and its length in one word, so that whatever moves a sequence moves its length
/// with it, and the passes after the first shuffle read memory in order. (Reading
/// `lengths[sequence]` for sequences in a random order misses the cache on every read of a large
/// set, and was most of the time of a plan.)
pub(super) fn pair(sequence: u32, length: u32) -> u64 {
    u64::from(length) << 32 | u64::from(sequence)
}

/// The sequence of a [`pair`].
pub(super) fn sequence_of(pair: u64) -> u32 {
    pair as u32
}

/// The length of a [`pair`].
pub(super) fn length_of(pair: u64) -> u32 {
    (pair >> 32) as u32
}

/// The deal of `lengths` to `lanes` lanes (at least one) in `epoch` (see the module's comment),
/// its spare buffer with room for `room` pieces. `counts[length]` is each length's count, or
/// empty when the planner has none (the sort counts them then).
pub(super) fn deal(
    lengths: &[u32],
    counts: &[u32],
    seed: u64,
    epoch: u64,
    lanes: usize,
    room: usize,
) -> Result<Deal> {
    let mut rng = PlanRng::new(seed, epoch, Stream::Lanes);
    let Sorted {
        mut sorted,
        spare: mut order,
        runs,
    } = shuffled_longest_first(lengths, counts, &mut rng, room)?;

    let mut lane_numbers = try_with_capacity("the number of every lane", lanes)?;
    lane_numbers.extend(0..lanes as u32);
    rng.shuffle(&mut lane_numbers);
    // Dealt twice: first to count each lane's sequences, then to place each in its lane.
    let mut dealer = Dealer::new(lanes)?;
    let mut counts = try_vec("the sequences of every lane", lanes, 0usize)?;
    for &(length, count) in &runs {
        dealer.deal(length, count as usize, &mut Count(&mut counts));
    }
    let mut starts = try_vec("the start of every lane", lanes + 1, 0usize)?;
    let mut steps = try_vec("the steps of every lane", lanes, 0u64)?;
    for (dealt, &lane) in lane_numbers.iter().enumerate() {
        starts[lane as usize + 1] = counts[dealt];
        steps[lane as usize] = dealer.load[dealt];
    }
    for lane in 0..lanes {
        starts[lane + 1] += starts[lane];
    }
    // The next place in `order` of each dealt lane (`counts` is done with).
    let mut next = counts;
    for (dealt, &lane) in lane_numbers.iter().enumerate() {
        next[dealt] = starts[lane as usize];
    }
    dealer.restart();
    let mut place = Place {
        sorted: &sorted,
        at: 0,
        length: 0,
        next: &mut next,
        order: &mut order,
    };
    for &(length, count) in &runs {
        place.length = length;
        dealer.deal(length, count as usize, &mut place);
    }
    for lane in 0..lanes {
        rng.shuffle_ahead::<AHEAD_LANE>(&mut order[starts[lane]..starts[lane + 1]]);
    }
    sorted.clear();
    Ok(Deal {
        order,
        starts,
        steps,
        spare: sorted,
    })
}

/// What a deal does with the lanes it chooses, in the order of the sorted sequences.
trait Hand {
    /// The next sequence goes to dealt lane `dealt`.
    fn one(&mut self, dealt: u32);
    /// The next `count` sequences go to the lanes of `turns` (the low 32 bits of each) in turn,
    /// from the first, around again as often as it takes.
    fn turns(&mut self, turns: &[u64], count: usize);
}

/// Counts each dealt lane's sequences.
struct Count<'a>(&'a mut [usize]);

impl Hand for Count<'_> {
    fn one(&mut self, dealt: u32) {
        self.0[dealt as usize] += 1;
    }
    fn turns(&mut self, turns: &[u64], count: usize) {
        if count == 0 {
            return;
        }
        let (rounds, rest) = (count / turns.len(), count % turns.len());
        for (at, &turn) in turns.iter().enumerate() {
            self.0[turn as u32 as usize] += rounds + usize::from(at < rest);
        }
    }
}

/// How far ahead in its lane a place is prefetched as each sequence is placed: two cache lines.
/// The lanes are written side by side, more streams than the processor follows on its own, and
/// a write that misses the cache holds up the ones after it (writes are made in order). At 50M
/// sequences placing took about 62 ms instead of 87 (32 ahead: 65); at 5M, 7.0 instead of 7.3
/// (BENCHMARKS.md, issue 26, fifth pass).
const PLACE_AHEAD: usize = 16;

/// Writes each sequence at the next place of its lane.
struct Place<'a> {
    /// The sequences, longest first, how many of them are placed, and the length of the run
    /// being dealt.
    sorted: &'a [u32],
    at: usize,
    length: u32,
    next: &'a mut [usize],
    order: &'a mut [u64],
}

impl Hand for Place<'_> {
    fn one(&mut self, dealt: u32) {
        let next = &mut self.next[dealt as usize];
        self.order[*next] = pair(self.sorted[self.at], self.length);
        *next += 1;
        self.at += 1;
    }
    fn turns(&mut self, turns: &[u64], count: usize) {
        if count == 0 {
            return;
        }
        // The next `count` sorted sequences, a round of `turns` at a time (the last one short).
        let sequences = &self.sorted[self.at..self.at + count];
        self.at += count;
        for round in sequences.chunks(turns.len()) {
            for (&sequence, &turn) in round.iter().zip(turns) {
                let next = &mut self.next[turn as u32 as usize];
                prefetch(self.order, *next + PLACE_AHEAD);
                self.order[*next] = pair(sequence, self.length);
                *next += 1;
            }
        }
    }
}
