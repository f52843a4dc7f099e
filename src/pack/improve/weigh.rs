//! Weighing every trade with one bin, the search's innermost loop: up to two of the bin's
//! lengths out, and the fullest set of the pool that fits their place in.

use super::{count_of, Search, Trade, MAX_POOL_FOR_PAIRS, NONE};

/// A set of pool lengths: (steps, first, second or NONE); (0, NONE, NONE) for none.
pub(super) type Set = (u32, u32, u32);

const NO_SET: Set = (0, NONE, NONE);

/// The pool's sets of at most some number of steps: how many, and the fullest (the last).
#[derive(Clone, Copy)]
pub(super) struct Within {
    sets: u32,
    fullest: Set,
}

impl Default for Within {
    fn default() -> Self {
        Within {
            sets: 0,
            fullest: NO_SET,
        }
    }
}

/// The work of finding where the sets of at most some steps end, `sets` of them: a binary
/// search's steps (a table look-up stands in for it, counted the same so plans do not change).
fn finding(sets: usize) -> u64 {
    1 + u64::from(usize::BITS - sets.leading_zeros())
}

/// The trades with one bin weighed so far: the best, and the work of finding them.
struct Weighing {
    /// The steps the bin has room for.
    room: u32,
    work: u64,
    best: Option<Trade>,
}

impl Weighing {
    /// Weighs giving out `out` (`items` of them, of `steps`) for `into`, found in `found` work:
    /// true once a trade fills the bin (none can do better).
    // Inlined into each of the three loops of `weigh`, the innermost code of the search: left
    // to the compiler it stayed a call, with a fifth of the search's samples in `perf`.
    #[inline(always)]
    fn weigh(&mut self, out: [u32; 2], steps: u32, items: u32, (found, into): (u64, Set)) -> bool {
        self.work += found;
        // Nothing for nothing is no trade.
        if items == 0 && into.1 == NONE {
            return false;
        }
        let gain = i64::from(into.0) - i64::from(steps);
        let score = gain * 8 + i64::from(items) - i64::from(count_of([into.1, into.2]));
        if self.best.is_none_or(|best| score > best.score) {
            self.best = Some(Trade {
                out,
                into: [into.1, into.2],
                score,
            });
        }
        gain == i64::from(self.room)
    }
}

impl Search {
    /// The best trade with `bin` by what it does to the pool: fewest steps left in it, then
    /// most (and so shortest) lengths. `score` is positive for trades that fill the bin more.
    pub(super) fn best_trade(&mut self, bin: u32) -> Option<Trade> {
        self.refresh_pool_sets();
        // Items the bin may take in besides those it gives out.
        let free = self.cap - self.contents.len(bin);
        // Most bins, most of the time: no pool item is tabu there and the cap (if any) leaves
        // room for a pair, so every set fits.
        let no_tabu = self.tabu_ends <= self.trades || (self.shortcuts && !self.may_hold_tabu(bin));
        if !(free >= 2 && no_tabu && !self.within.is_empty()) {
            let (work, best) = self.weigh::<false>(bin, free);
            self.work += work;
            return best;
        }
        // A bin with room that holds the same lengths as one found unhelpful since the pool
        // last changed is unhelpful too, at the same work (`seen.rs`).
        let (len, fill, key) = self.contents.summary(bin);
        let key = self.seen_key(len, fill, key);
        if let Some(work) = key.and_then(|key| self.seen.unhelpful(key, self.pool_version)) {
            self.work += work;
            return None;
        }
        let (work, best) = self.weigh::<true>(bin, free);
        self.work += work;
        if let Some(key) = key.filter(|_| best.is_none_or(|trade| trade.score <= 0)) {
            self.seen.keep(key, self.pool_version, work);
        }
        best
    }

    /// The key under which `seen.rs` keeps what weighing a bin of `len` lengths, `fill` steps and
    /// lengths' key `key` found: where the shortcuts are on, the fast path weighs it (the cap
    /// leaves room for a pair), it has a key and it has room. One rule for `best_trade`, which
    /// keeps and looks up, and `pass_known`, which only looks up.
    fn seen_key(&self, len: u32, fill: u32, key: u64) -> Option<u64> {
        (self.shortcuts && self.cap - len >= 2 && key != 0 && fill < self.t_max).then_some(key)
    }

    /// How many of the `count` bins from `bin` on (round from the last to the first) are known
    /// to have no helpful trade against the pool as it is (`seen.rs`), as `best_trade` would find
    /// them, their work counted: the sweep passes them in a loop of its own, without weighing.
    pub(super) fn pass_known(&mut self, mut bin: u32, count: u32) -> u32 {
        // As in `best_trade`: the pool's sets must be those of the pool, and the fast path taken.
        if !self.shortcuts
            || self.pool_changed
            || self.tabu_ends > self.trades
            || self.within.is_empty()
        {
            return 0;
        }
        let bins = self.bins as u32;
        let mut passed = 0;
        while passed < count {
            let (len, fill, key) = self.contents.summary(bin);
            let Some(work) = self
                .seen_key(len, fill, key)
                .and_then(|key| self.seen.unhelpful(key, self.pool_version))
            else {
                break;
            };
            self.work += work;
            passed += 1;
            bin = if bin + 1 == bins { 0 } else { bin + 1 };
        }
        passed
    }

    /// The best trade with `bin` and the work of finding it, where it may take in `free` items
    /// besides those it gives out (and where `EVERY_SET_FITS`, every pool set fits it). Out of
    /// the bin: two items, one, or nothing, first to last.
    fn weigh<const EVERY_SET_FITS: bool>(&self, bin: u32, free: u32) -> (u64, Option<Trade>) {
        let fullest = |limit, out| self.fullest::<EVERY_SET_FITS>(bin, limit, out, free);
        let slots = self.contents.slots(bin);
        let room = self.t_max - self.contents.fill(bin);
        let mut weighing = Weighing {
            room,
            work: 0,
            best: None,
        };
        'weighed: {
            for (first, a) in slots.iter().enumerate() {
                for b in &slots[first + 1..] {
                    let steps = a.steps + b.steps;
                    let into = fullest(steps + room, 2);
                    if weighing.weigh([a.item, b.item], steps, 2, into) {
                        break 'weighed;
                    }
                }
                let into = fullest(a.steps + room, 1);
                if weighing.weigh([a.item, NONE], a.steps, 1, into) {
                    break 'weighed;
                }
            }
            weighing.weigh([NONE, NONE], 0, 0, fullest(room, 0));
        }
        (weighing.work, weighing.best)
    }

    /// The fullest pool set of at most `limit` steps that `bin` may take in place of `out`
    /// items, and the work of finding it; see `weigh`.
    // Inlined into each of the three loops of `weigh`, for the same reason as `Weighing::weigh`.
    #[inline(always)]
    fn fullest<const EVERY_SET_FITS: bool>(
        &self,
        bin: u32,
        limit: u32,
        out: u32,
        free: u32,
    ) -> (u64, Set) {
        if EVERY_SET_FITS {
            // The fullest within the limit is then the first that `scan` would look at.
            let within = self.within[limit as usize];
            let scanned = u64::from(within.sets > 0);
            (finding(within.sets as usize) + scanned, within.fullest)
        } else {
            self.scan(bin, limit, free.saturating_add(out))
        }
    }

    /// The fullest pool set of at most `limit` steps that `bin` may take (at most `room_for`
    /// items, none tabu there), and the work of finding it.
    fn scan(&self, bin: u32, limit: u32, room_for: u32) -> (u64, Set) {
        let mut at = match self.within.get(limit as usize) {
            Some(within) => within.sets as usize,
            None => self.pool_sets.partition_point(|set| set.0 <= limit),
        };
        let mut work = finding(at);
        while at > 0 {
            at -= 1;
            work += 1;
            let set @ (_, a, b) = self.pool_sets[at];
            let fits = count_of([a, b]) <= room_for;
            if fits && !self.is_tabu(a, bin) && !self.is_tabu(b, bin) {
                return (work, set);
            }
        }
        (work, NO_SET)
    }

    pub(super) fn refresh_pool_sets(&mut self) {
        if !self.pool_changed {
            return;
        }
        let sets = &mut self.pool_sets;
        sets.clear();
        for (at, &a) in self.pool.iter().enumerate() {
            sets.push((self.size[a as usize], a, NONE));
            if self.pool.len() <= MAX_POOL_FOR_PAIRS {
                for &b in &self.pool[at + 1..] {
                    sets.push((self.size[a as usize] + self.size[b as usize], a, b));
                }
            }
        }
        sets.sort_unstable();
        self.work += sets.len() as u64;
        let mut below = 0;
        for (steps, within) in (0u32..).zip(self.within.iter_mut()) {
            while below < sets.len() && sets[below].0 <= steps {
                below += 1;
            }
            *within = Within {
                sets: below as u32,
                fullest: below.checked_sub(1).map_or(NO_SET, |last| sets[last]),
            };
        }
        self.pool_changed = false;
        self.pool_version = self.pool_version.wrapping_add(1);
    }

    /// Whether some item may be tabu in `bin` (false: none is; see `tabu_kicks`). Where none
    /// is, `scan` finds what the table does at the same work, so the fast path is taken.
    fn may_hold_tabu(&self, bin: u32) -> bool {
        let trades = self.trades;
        self.tabu_kicks
            .iter()
            .any(|&(kicked, until)| kicked == bin && until > trades)
    }

    fn is_tabu(&self, item: u32, bin: u32) -> bool {
        item != NONE
            && self.tabu_bin[item as usize] == bin
            && self.tabu_until[item as usize] > self.trades
    }
}
