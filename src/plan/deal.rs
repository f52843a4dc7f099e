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
//! computed here in time linear in the sequences:
//! - The sort is a counting sort on the length (two 16-bit digits, least significant first, when
//!   the lengths span more than 2^16 values), stable like the sort it stands for.
//! - The sequences of one length `L` are dealt together. A lane of `q L + r` steps (`r < L`)
//!   takes its `j`-th of them at the heap's key `(q L + r + j L, lane)`, which orders as
//!   `(q + j, r, lane)`: the run is dealt in rounds, round `p` to the lanes with `q <= p` in the
//!   order of `(r, lane)`. Until a lane more than one round ahead of the lightest joins, each
//!   round is one list of lanes, written out without a heap. Where that saves nothing (a run
//!   shorter than the lanes, or lanes far apart), the heap deals one sequence at a time. Both
//!   make the heap's own choices, so the deal is the same; a test below checks it against the
//!   rule as written.

use crate::alloc::{try_vec, try_with_capacity};
use crate::error::Result;
use crate::rng::{PlanRng, Stream};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The sequences of every lane, end to end: lane `l` is `order[starts[l]..starts[l + 1]]`, and
/// holds `steps[l]` steps.
pub(super) struct Deal {
    pub(super) order: Vec<u32>,
    pub(super) starts: Vec<usize>,
    pub(super) steps: Vec<u64>,
}

/// Lengths spanning fewer values than this sort in one counting pass.
const DIGIT: u32 = 1 << 16;

/// The deal of `lengths` to `lanes` lanes (at least one) in `epoch` (see the module's comment).
pub(super) fn deal(lengths: &[u32], seed: u64, epoch: u64, lanes: usize) -> Result<Deal> {
    let mut rng = PlanRng::new(seed, epoch, Stream::Lanes);
    let mut order = try_with_capacity("the order of the sequences", lengths.len())?;
    order.extend(0..lengths.len() as u32);
    rng.shuffle(&mut order);
    let (sorted, runs) = longest_first(lengths, &order)?;

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
        next: &mut next,
        order: &mut order,
    };
    for &(length, count) in &runs {
        dealer.deal(length, count as usize, &mut place);
    }
    for lane in 0..lanes {
        rng.shuffle(&mut order[starts[lane]..starts[lane + 1]]);
    }
    Ok(Deal {
        order,
        starts,
        steps,
    })
}

/// The sequences of `order` sorted longest first, stably, and the runs of one length in that
/// order: `(length, sequences)`.
fn longest_first(lengths: &[u32], order: &[u32]) -> Result<(Vec<u32>, Vec<(u32, u32)>)> {
    let longest = lengths.iter().copied().max().unwrap_or(0);
    let shortest = lengths.iter().copied().min().unwrap_or(0);
    // Sorted ascending by how much shorter than the longest: longest first.
    let key = |sequence: u32| longest - lengths[sequence as usize];
    let mut sorted = try_vec("the sequences sorted by length", order.len(), 0u32)?;
    if longest - shortest < DIGIT {
        let counts = counting_pass(order, &mut sorted, longest - shortest, key)?;
        let runs = (0..=longest - shortest).filter(|&k| counts[k as usize] > 0);
        let mut kept = try_with_capacity("the lengths present", runs.clone().count())?;
        kept.extend(runs.map(|k| (longest - k, counts[k as usize])));
        return Ok((sorted, kept));
    }
    // Two digits, the low one first: the second pass keeps the order of the first within each
    // high digit, which makes the whole sort stable.
    let mut low = try_vec(
        "the sequences sorted by length's low digit",
        order.len(),
        0u32,
    )?;
    counting_pass(order, &mut low, DIGIT - 1, |sequence| key(sequence) % DIGIT)?;
    counting_pass(&low, &mut sorted, u32::MAX / DIGIT, |sequence| {
        key(sequence) / DIGIT
    })?;
    drop(low);
    let lengths_present = 1 + sorted
        .windows(2)
        .filter(|pair| lengths[pair[0] as usize] != lengths[pair[1] as usize])
        .count();
    let mut runs: Vec<(u32, u32)> = try_with_capacity("the lengths present", lengths_present)?;
    for &sequence in &sorted {
        let length = lengths[sequence as usize];
        match runs.last_mut() {
            Some((last, count)) if *last == length => *count += 1,
            _ => runs.push((length, 1)),
        }
    }
    Ok((sorted, runs))
}

/// A stable counting sort of `items` into `sorted` by `key` (at most `most`); the count of
/// every key.
fn counting_pass(
    items: &[u32],
    sorted: &mut [u32],
    most: u32,
    key: impl Fn(u32) -> u32,
) -> Result<Vec<u32>> {
    let mut counts = try_vec("the sequences of each length", most as usize + 1, 0u32)?;
    for &item in items {
        counts[key(item) as usize] += 1;
    }
    let mut next = try_vec("the next place of each length", most as usize + 1, 0u32)?;
    for k in 1..next.len() {
        next[k] = next[k - 1] + counts[k - 1];
    }
    for &item in items {
        let k = key(item) as usize;
        sorted[next[k] as usize] = item;
        next[k] += 1;
    }
    Ok(counts)
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

/// Writes each sequence at the next place of its lane.
struct Place<'a> {
    /// The sequences, longest first, and how many of them are placed.
    sorted: &'a [u32],
    at: usize,
    next: &'a mut [usize],
    order: &'a mut [u32],
}

impl Hand for Place<'_> {
    fn one(&mut self, dealt: u32) {
        let next = &mut self.next[dealt as usize];
        self.order[*next] = self.sorted[self.at];
        *next += 1;
        self.at += 1;
    }
    fn turns(&mut self, turns: &[u64], count: usize) {
        for &turn in turns.iter().cycle().take(count) {
            self.one(turn as u32);
        }
    }
}

/// The lanes' steps as the deal goes on.
struct Dealer {
    /// Steps of each dealt lane.
    load: Vec<u64>,
    /// Every dealt lane as `(load, dealt)`, the lightest (then lowest) on top.
    heap: BinaryHeap<Reverse<(u64, u32)>>,
    /// Scratch of a deal in rounds: `r << 32 | dealt` of the lanes of the first round, and of
    /// those of the rounds after it.
    first: Vec<u64>,
    every: Vec<u64>,
}

impl Dealer {
    fn new(lanes: usize) -> Result<Self> {
        let mut dealer = Dealer {
            load: try_vec("the steps of every dealt lane", lanes, 0)?,
            heap: BinaryHeap::from(try_with_capacity::<Reverse<(u64, u32)>>(
                "the lightest lanes",
                lanes,
            )?),
            first: try_with_capacity("the lanes of a round", lanes)?,
            every: try_with_capacity("the lanes of a round", lanes)?,
        };
        dealer.restart();
        Ok(dealer)
    }

    /// Every lane empty again.
    fn restart(&mut self) {
        self.load.fill(0);
        self.rebuild_heap();
    }

    /// The heap again from `load` (within its capacity: no allocation).
    fn rebuild_heap(&mut self) {
        let mut entries = std::mem::take(&mut self.heap).into_vec();
        entries.clear();
        entries.extend(
            (0..)
                .zip(&self.load)
                .map(|(dealt, &load)| Reverse((load, dealt))),
        );
        self.heap = BinaryHeap::from(entries);
    }

    /// Deals `count` sequences of `length` steps.
    fn deal(&mut self, length: u32, count: usize, hand: &mut impl Hand) {
        let lanes = self.load.len();
        let mut left = count;
        while left > 0 {
            if left >= lanes {
                if let Some(dealt) = self.in_rounds(u64::from(length), left, hand) {
                    left -= dealt;
                    continue;
                }
            }
            // One at a time: as many as there are lanes, which pays for the look at every
            // lane that found rounds not worth it.
            let one_by_one = left.min(lanes);
            for _ in 0..one_by_one {
                if let Some(mut top) = self.heap.peek_mut() {
                    let Reverse((load, dealt)) = *top;
                    let load = load + u64::from(length);
                    self.load[dealt as usize] = load;
                    hand.one(dealt);
                    // The heap puts it in its place when `top` is dropped.
                    *top = Reverse((load, dealt));
                }
            }
            left -= one_by_one;
        }
    }

    /// Deals in rounds (see the module's comment) up to `left` sequences of `length` steps, as
    /// long as no lane joins that is more than a round ahead of the lightest; how many it dealt,
    /// or None if that would be fewer than the lanes (and it dealt none).
    fn in_rounds(&mut self, length: u64, left: usize, hand: &mut impl Hand) -> Option<usize> {
        let Reverse((lightest, _)) = *self.heap.peek()?;
        let round = lightest / length;
        let (first, every) = (&mut self.first, &mut self.every);
        first.clear();
        every.clear();
        // The round in which the first lane further ahead joins (none: never).
        let mut joins = u64::MAX;
        for (dealt, &load) in (0u64..).zip(&self.load) {
            let turn = (load % length) << 32 | dealt;
            match load / length {
                q if q == round => {
                    first.push(turn);
                    every.push(turn);
                }
                q if q == round + 1 => every.push(turn),
                q => joins = joins.min(q),
            }
        }
        // Round `round` for `first`, then rounds `round + 1 .. joins` for `every`.
        let full_rounds = joins - round - 1;
        let most = (every.len() as u64)
            .saturating_mul(full_rounds)
            .saturating_add(first.len() as u64);
        if most < self.load.len() as u64 {
            return None;
        }
        let dealt = left.min(usize::try_from(most).unwrap_or(usize::MAX));
        first.sort_unstable();
        every.sort_unstable();
        let from_first = dealt.min(first.len());
        hand.turns(&first[..from_first], from_first);
        hand.turns(every, dealt - from_first);
        for &turn in &first[..from_first] {
            self.load[turn as u32 as usize] += length;
        }
        let (rounds, rest) = (
            (dealt - from_first) / every.len(),
            (dealt - from_first) % every.len(),
        );
        for (at, &turn) in every.iter().enumerate() {
            let taken = rounds + usize::from(at < rest);
            self.load[turn as u32 as usize] += length * taken as u64;
        }
        self.rebuild_heap();
        Some(dealt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The rule as written (what lanes did before this file): a stable sort and a heap.
    fn deal_as_written(lengths: &[u32], seed: u64, epoch: u64, lanes: usize) -> Deal {
        let mut rng = PlanRng::new(seed, epoch, Stream::Lanes);
        let mut order: Vec<u32> = (0..lengths.len() as u32).collect();
        rng.shuffle(&mut order);
        order.sort_by_key(|&sequence| Reverse(lengths[sequence as usize]));
        let mut lane_numbers: Vec<u32> = (0..lanes as u32).collect();
        rng.shuffle(&mut lane_numbers);
        let mut steps = vec![0u64; lanes];
        let mut of_lane = vec![Vec::new(); lanes];
        let mut lightest: BinaryHeap<Reverse<(u64, usize)>> =
            (0..lanes).map(|dealt| Reverse((0, dealt))).collect();
        for &sequence in &order {
            let Reverse((load, dealt)) = lightest.pop().unwrap();
            let lane = lane_numbers[dealt] as usize;
            let load = load + u64::from(lengths[sequence as usize]);
            of_lane[lane].push(sequence);
            steps[lane] = load;
            lightest.push(Reverse((load, dealt)));
        }
        let mut starts = vec![0];
        for lane in &mut of_lane {
            rng.shuffle(lane);
            starts.push(starts.last().unwrap() + lane.len());
        }
        Deal {
            order: of_lane.concat(),
            starts,
            steps,
        }
    }

    fn assert_same(lengths: &[u32], seed: u64, lanes: usize) {
        let fast = deal(lengths, seed, 1, lanes).unwrap();
        let written = deal_as_written(lengths, seed, 1, lanes);
        assert_eq!(fast.order, written.order);
        assert_eq!(fast.starts, written.starts);
        assert_eq!(fast.steps, written.steps);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn the_deal_is_the_rule_as_written(
            lengths in prop::collection::vec(prop_oneof![
                4 => 1u32..=12,
                2 => 1u32..=300,
                1 => 1u32..=200_000,
                1 => prop::sample::select(vec![1, 7, u32::MAX]),
            ], 1..400),
            lanes in 1usize..=40,
            seed in any::<u64>(),
        ) {
            let fast = deal(&lengths, seed, 1, lanes).unwrap();
            let written = deal_as_written(&lengths, seed, 1, lanes);
            prop_assert_eq!(fast.order, written.order);
            prop_assert_eq!(fast.starts, written.starts);
            prop_assert_eq!(fast.steps, written.steps);
        }
    }

    #[test]
    fn long_runs_far_apart_lanes_and_wide_lengths_deal_as_written() {
        // Runs of thousands of one length, dealt in rounds.
        let runs: Vec<u32> = (0..20_000).map(|i| 1 + i % 7 * 13).collect();
        assert_same(&runs, 3, 32);
        // One lane far ahead of the rest for most of the deal; every lane alike.
        let mut giant = vec![1_000_000];
        giant.extend((0..5_000).map(|i| 1 + i % 50));
        assert_same(&giant, 4, 6);
        assert_same(&[9; 1_000], 5, 10);
        // Lengths over more than 2^16 values: the two-digit sort.
        let wide: Vec<u32> = (0..3_000u64)
            .map(|i| 1 + (i * 2_654_435_761 % 5_000_000) as u32)
            .collect();
        assert_same(&wide, 6, 17);
        // As many lanes as sequences, and one lane.
        assert_same(&runs[..50], 7, 50);
        assert_same(&runs[..50], 8, 1);
    }
}
