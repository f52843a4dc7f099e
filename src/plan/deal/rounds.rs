//! One length's run of a deal: the lanes that take its sequences, in rounds where they can be
//! written out as lists, otherwise one at a time from a heap (see `mod.rs`).

use super::Hand;
use crate::alloc::{try_vec, try_with_capacity};
use crate::error::Result;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The lanes' steps as the deal goes on.
pub(super) struct Dealer {
    /// Steps of each dealt lane.
    pub(super) load: Vec<u64>,
    /// Every dealt lane as `(load, dealt)`, the lightest (then lowest) on top.
    heap: BinaryHeap<Reverse<(u64, u32)>>,
    /// Scratch of a deal in rounds: `r << 32 | dealt` of the lanes of the first round, and of
    /// those of the rounds after it.
    first: Vec<u64>,
    every: Vec<u64>,
}

impl Dealer {
    pub(super) fn new(lanes: usize) -> Result<Self> {
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
    pub(super) fn restart(&mut self) {
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
    pub(super) fn deal(&mut self, length: u32, count: usize, hand: &mut impl Hand) {
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
