//! The moves of the improvement search: trades of up to two lengths for up to two between a bin
//! and the pool, and forced placements when no trade helps.

use super::{Search, Trade, KICK_TRIES, MAX_POOL_FOR_PAIRS, NONE, TABU_TENURE};

impl Search {
    /// The best trade with `bin` by what it does to the pool: fewest steps left in it, then
    /// most (and so shortest) lengths. `score` is positive for trades that fill the bin more.
    pub(super) fn best_trade(&mut self, bin: u32) -> Option<Trade> {
        self.refresh_pool_sets();
        self.collect(bin);
        let room = self.t_max - self.fill[bin as usize];
        let mut best: Option<Trade> = None;
        let count = self.scratch.len();
        // Out of the bin: nothing, one item, or two; into it, the fullest pool set that fits.
        for first in 0..=count {
            for second in first..=count {
                if second == first && first != count {
                    continue;
                }
                let out = [self.out_item(first), self.out_item(second)];
                let out_steps = self.steps_of(out);
                let limit = out_steps + room;
                let mut at = match self.sets_upto.get(limit as usize) {
                    Some(&sets) => sets as usize,
                    None => self.pool_sets.partition_point(|set| set.0 <= limit),
                };
                self.work += 1 + u64::from(usize::BITS - at.leading_zeros());
                // Items the bin may take in: what the cap leaves once `out` has gone.
                let room_for = (self.cap - self.items[bin as usize]).saturating_add(count_of(out));
                // Nothing in, unless some pool set fits (and nothing for nothing is no trade).
                let mut into = (0, NONE, NONE);
                while at > 0 {
                    at -= 1;
                    self.work += 1;
                    let (_, a, b) = self.pool_sets[at];
                    let fits = count_of([a, b]) <= room_for;
                    if fits && !self.is_tabu(a, bin) && !self.is_tabu(b, bin) {
                        into = self.pool_sets[at];
                        break;
                    }
                }
                if out[0] == NONE && into.1 == NONE {
                    continue;
                }
                let moved = |items: [u32; 2]| items.iter().filter(|&&i| i != NONE).count() as i64;
                let gain = i64::from(into.0) - i64::from(out_steps);
                let score = gain * 8 + moved(out) - moved([into.1, into.2]);
                if best.is_none_or(|best| score > best.score) {
                    best = Some(Trade {
                        out,
                        into: [into.1, into.2],
                        score,
                    });
                }
                if gain == i64::from(room) {
                    return best;
                }
            }
        }
        best
    }

    /// Forces a random pool item into a random bin, pushing out the fewest steps that make room;
    /// what it pushes out may not return there for a while.
    pub(super) fn kick(&mut self) {
        let item = self.pool[self.rng.below(self.pool.len() as u32) as usize];
        let steps = self.size[item as usize];
        for _ in 0..KICK_TRIES {
            let bin = self.rng.below(self.bins as u32);
            self.collect(bin);
            let need = (self.fill[bin as usize] + steps).saturating_sub(self.t_max);
            // Items to push out so that the bin stays within the cap.
            let need_items = (self.items[bin as usize] + 1).saturating_sub(self.cap);
            let count = self.scratch.len();
            let mut best: Option<(u32, [u32; 2])> = None;
            for first in 0..=count {
                for second in first..=count {
                    if second == first && first != count {
                        continue;
                    }
                    self.work += 1;
                    let out = [self.out_item(first), self.out_item(second)];
                    let out_steps = self.steps_of(out);
                    let enough = out_steps >= need && count_of(out) >= need_items;
                    if enough && best.is_none_or(|(fewest, _)| out_steps < fewest) {
                        best = Some((out_steps, out));
                    }
                }
            }
            if let Some((_, out)) = best {
                let trade = Trade {
                    out,
                    into: [item, NONE],
                    score: 0,
                };
                self.apply(bin, trade);
                let until = self.trades + TABU_TENURE;
                for pushed in out.into_iter().filter(|&pushed| pushed != NONE) {
                    self.tabu_bin[pushed as usize] = bin;
                    self.tabu_until[pushed as usize] = until;
                }
                return;
            }
        }
    }

    pub(super) fn apply(&mut self, bin: u32, trade: Trade) {
        for item in trade.out.into_iter().filter(|&item| item != NONE) {
            self.unlink(item);
            self.pool.push(item);
            self.pool_steps += u64::from(self.size[item as usize]);
        }
        for item in trade.into.into_iter().filter(|&item| item != NONE) {
            let at = self.pool.iter().position(|&pooled| pooled == item);
            self.pool
                .swap_remove(at.expect("a traded item is in the pool"));
            self.pool_steps -= u64::from(self.size[item as usize]);
            self.link(item, bin);
        }
        self.pool_changed = true;
        self.trades += 1;
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
        for (steps, upto) in (0u32..).zip(self.sets_upto.iter_mut()) {
            while below < sets.len() && sets[below].0 <= steps {
                below += 1;
            }
            *upto = below as u32;
        }
        self.pool_changed = false;
    }

    fn collect(&mut self, bin: u32) {
        self.scratch.clear();
        let mut item = self.head[bin as usize];
        while item != NONE {
            self.scratch.push(item);
            item = self.next[item as usize];
        }
    }

    /// The `at`-th item of the bin collected, or NONE past its end.
    fn out_item(&self, at: usize) -> u32 {
        self.scratch.get(at).copied().unwrap_or(NONE)
    }

    fn steps_of(&self, items: [u32; 2]) -> u32 {
        items
            .into_iter()
            .filter(|&item| item != NONE)
            .map(|item| self.size[item as usize])
            .sum()
    }

    fn is_tabu(&self, item: u32, bin: u32) -> bool {
        item != NONE
            && self.tabu_bin[item as usize] == bin
            && self.tabu_until[item as usize] > self.trades
    }
}

/// Items among `items` (NONE: absent).
fn count_of(items: [u32; 2]) -> u32 {
    items.iter().filter(|&&item| item != NONE).count() as u32
}
