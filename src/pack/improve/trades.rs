//! The moves of the improvement search: trades of up to two lengths for up to two between a bin
//! and the pool (weighed in `weigh.rs`), and forced placements when no trade helps.

use super::{count_of, Search, Trade, KICK_TRIES, NONE, TABU_TENURE};

impl Search {
    /// Forces a random pool item into a random bin, pushing out the fewest steps that make room;
    /// what it pushes out may not return there for a while.
    pub(super) fn kick(&mut self) {
        let item = self.pool[self.rng.below(self.pool.len() as u32) as usize];
        let steps = self.size[item as usize];
        for _ in 0..KICK_TRIES {
            let bin = self.rng.below(self.bins as u32);
            self.scratch.clear();
            self.scratch.extend_from_slice(self.contents.slots(bin));
            let need = (self.contents.fill(bin) + steps).saturating_sub(self.t_max);
            // Items to push out so that the bin stays within the cap.
            let need_items = (self.contents.len(bin) + 1).saturating_sub(self.cap);
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
                self.tabu_ends = until;
                for pushed in out.into_iter().filter(|&pushed| pushed != NONE) {
                    self.tabu_bin[pushed as usize] = bin;
                    self.tabu_until[pushed as usize] = until;
                }
                if count_of(out) > 0 {
                    self.tabu_kicks[self.tabu_kicks_next] = (bin, until);
                    self.tabu_kicks_next = (self.tabu_kicks_next + 1) % self.tabu_kicks.len();
                }
                return;
            }
        }
    }

    pub(super) fn apply(&mut self, bin: u32, trade: Trade) {
        for item in trade.out.into_iter().filter(|&item| item != NONE) {
            self.contents.unlink(item);
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

    /// The `at`-th item of the bin in `scratch`, or NONE past its end.
    fn out_item(&self, at: usize) -> u32 {
        self.scratch.get(at).map_or(NONE, |slot| slot.item)
    }

    fn steps_of(&self, items: [u32; 2]) -> u32 {
        items
            .into_iter()
            .filter(|&item| item != NONE)
            .map(|item| self.size[item as usize])
            .sum()
    }
}
