//! Whether the pool of the improvement search fits in the bins it may fill, and how to split it
//! in two: a subset sum over the pool's lengths.

use super::{Search, NONE};

impl Search {
    /// Whether the pool fits in the spare bins; for two, `split` is left holding what goes in
    /// the first (found by a subset sum over the pool: some part of it between `pool - t_max`
    /// and `t_max` steps).
    pub(super) fn pool_fits(&mut self) -> bool {
        let t_max = u64::from(self.t_max);
        let items = self.pool.len() as u64;
        let cap = u64::from(self.cap);
        if self.pool_steps <= t_max && items <= cap {
            self.split.clear();
            return true;
        }
        if self.spare < 2 || self.pool_steps > 2 * t_max || items > 2 * cap {
            return false;
        }
        let low = self.pool_steps.saturating_sub(t_max) as u32;
        // Reachable sums, ascending, as entries of `sums`: (sum, item added, entry it extends).
        self.sums.clear();
        self.sums.push((0, NONE, NONE));
        self.reached.clear();
        self.reached.push(0);
        for &item in &self.pool {
            let steps = self.size[item as usize];
            self.merged.clear();
            let (mut old, mut new) = (0, 0);
            let reached = &self.reached;
            loop {
                self.work += 1;
                let old_sum = reached.get(old).map(|&e| self.sums[e as usize].0);
                let new_sum = reached
                    .get(new)
                    .map(|&e| self.sums[e as usize].0 + steps)
                    .filter(|&sum| sum <= self.t_max);
                match (old_sum, new_sum) {
                    (None, None) => break,
                    (Some(a), Some(b)) if a == b => {
                        self.merged.push(reached[old]);
                        old += 1;
                        new += 1;
                    }
                    (Some(a), b) if b.is_none_or(|b| a < b) => {
                        self.merged.push(reached[old]);
                        old += 1;
                    }
                    (_, Some(b)) => {
                        if self.sums.len() == self.sums.capacity() {
                            return false;
                        }
                        self.sums.push((b, item, reached[new]));
                        self.merged.push(self.sums.len() as u32 - 1);
                        new += 1;
                    }
                    (_, None) => unreachable!(),
                }
            }
            std::mem::swap(&mut self.reached, &mut self.merged);
        }
        // The split is by steps; under a cap, both parts must keep within it too: the first
        // part in range whose number of items does (without a cap, the first in range).
        for at in 0..self.reached.len() {
            let entry = self.reached[at];
            if !(low..=self.t_max).contains(&self.sums[entry as usize].0) {
                continue;
            }
            self.split.clear();
            let mut link = entry;
            while self.sums[link as usize].1 != NONE {
                self.split.push(self.sums[link as usize].1);
                link = self.sums[link as usize].2;
            }
            let first = self.split.len() as u64;
            if first <= cap && items - first <= cap {
                return true;
            }
            self.work += first;
        }
        self.split.clear();
        false
    }
}
