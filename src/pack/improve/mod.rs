//! Improving a packing that ends above the lower bound.
//!
//! Filling one block at a time, and best-fit decreasing, both commit each length for good. On
//! small sets whose lengths are a large share of `t_max` that can leave them a few blocks above
//! the bound (133 blocks against 130 on a few hundred real lengths). This search takes such a
//! packing apart again, one block at a time: the three emptiest blocks are dissolved into a pool,
//! and lengths are traded between the pool and the other blocks, up to two for up to two, each
//! trade making a block fuller and so the pool smaller; once the pool fits in two blocks, the
//! packing has one block fewer, and the search goes on for the next. When no trade helps, a
//! random pool length is forced into a random block, and what it pushes out may not go straight
//! back there (it is tabu for a few trades). This is a simple form of Buljubasic and Vasquez's
//! consistent neighbourhood search for bin packing (2016).
//!
//! Work is counted in trades examined, not time, and bounded, so a plan is the same on every
//! machine; the random choices come from a fixed ChaCha stream, so the packing does not depend
//! on the seed or the epoch. It runs only above the bound. On small sets every block takes part;
//! on larger ones only the blocks with room (a full block cannot get fuller, and nearly all
//! blocks of a large set are full), and past `MAX_LENGTHS` of those, none.

mod bins;
mod seen;
mod split;
mod trades;
mod weigh;

use super::Packing;
use crate::alloc::{try_vec, try_with_capacity};
use crate::error::Result;
use crate::rng::{PlanRng, Stream};
use bins::Bins;

/// The search may examine this many trades per length it holds (plus a fixed allowance), and
/// never more than `MAX_WORK`: a few milliseconds for a few hundred lengths, and a bounded cost
/// however large the set.
const WORK_PER_LENGTH: u64 = 5_000;
const WORK_ALLOWANCE: u64 = 1 << 16;
const MAX_WORK: u64 = 1 << 23;
/// Sets with more lengths in blocks with room are left as they are: the search is meant for
/// the small sets where one block is a large share of the total.
const MAX_LENGTHS: usize = 1 << 16;
/// Pairs of pool lengths are traded only while the pool is this small (their number grows with
/// its square).
const MAX_POOL_FOR_PAIRS: usize = 64;
/// Distinct sums the split of the pool in two may track; past this, the pool counts as not fitting.
const MAX_SPLIT_SUMS: usize = 1 << 16;
/// Trades during which a length pushed out of a block by force may not return to it.
const TABU_TENURE: u64 = 8;
/// Blocks of up to this many steps keep a table of the pool's sets by steps (see `within`);
/// larger ones search the sorted sets instead.
const MAX_TABLE: u32 = 1 << 14;
/// Random bins tried for one forced placement.
const KICK_TRIES: u32 = 8;

const NONE: u32 = u32::MAX;

/// `packing` with fewer blocks where the search finds them, otherwise unchanged. `bound` is the
/// fewest blocks any packing of these lengths can have with at most `cap` lengths a block
/// (`u32::MAX`: no cap), which every trade keeps to.
pub(crate) fn improve(packing: Packing, t_max: u32, cap: u32, bound: u64) -> Result<Packing> {
    improve_with(packing, t_max, cap, bound, true)
}

/// `improve`, where `shortcuts` says whether bins already known to have no helpful trade are
/// passed without weighing them and the fast path taken in bins no tabu item names: the same
/// trades either way (tested), only faster.
fn improve_with(
    packing: Packing,
    t_max: u32,
    cap: u32,
    bound: u64,
    shortcuts: bool,
) -> Result<Packing> {
    let blocks = packing.ends.len();
    if blocks as u64 <= bound {
        return Ok(packing);
    }
    // Every block takes part while the set is small; on larger sets only those with room
    // (full blocks cannot get fuller), and past that the search is skipped.
    let every_block = packing.lengths.len() <= MAX_LENGTHS;
    let (mut open, mut lengths, mut start) = (0usize, 0usize, 0usize);
    for &end in &packing.ends {
        let block = &packing.lengths[start..end as usize];
        if every_block || block.iter().sum::<u32>() < t_max {
            open += 1;
            lengths += block.len();
            if lengths > MAX_LENGTHS {
                // Too many to search, known as soon as they are counted: on Graphcore's
                // Wikipedia histogram, a quarter of the way through its 8M blocks.
                return Ok(packing);
            }
        }
        start = end as usize;
    }
    if open < 2 {
        return Ok(packing);
    }
    let full = (blocks - open) as u64;
    let budget = (WORK_ALLOWANCE + WORK_PER_LENGTH * lengths as u64).min(MAX_WORK);
    let mut search = Search::new(&packing, t_max, lengths, open, every_block, budget)?;
    search.cap = cap;
    search.shortcuts = shortcuts;
    if !search.run(bound.saturating_sub(full))? {
        return Ok(packing);
    }
    // The full blocks as they were, then the searched ones.
    let mut improved = Packing {
        lengths: try_with_capacity("the packed lengths", packing.lengths.len())?,
        ends: try_with_capacity("the ends of the packed blocks", blocks)?,
    };
    let mut start = 0;
    for &end in &packing.ends {
        let block = &packing.lengths[start..end as usize];
        if !every_block && block.iter().sum::<u32>() == t_max {
            improved.lengths.extend_from_slice(block);
            improved.close_block();
        }
        start = end as usize;
    }
    for bin in 0..search.bins as u32 {
        let slots = search.contents.slots(bin);
        improved.lengths.extend(slots.iter().map(|slot| slot.steps));
        improved.close_block();
    }
    Ok(improved)
}

/// A trade: bin lengths `out` go to the pool, pool lengths `into` go to the bin (NONE: absent).
#[derive(Clone, Copy)]
struct Trade {
    out: [u32; 2],
    into: [u32; 2],
    /// Steps the bin gains (times 8), plus the items the pool gains: higher is better.
    score: i64,
}

struct Search {
    t_max: u32,
    /// The most items a bin may hold.
    cap: u32,
    /// Per length (item): its steps.
    size: Vec<u32>,
    /// Where an item pushed out by force may not return, and until which trade.
    tabu_bin: Vec<u32>,
    tabu_until: Vec<u64>,
    /// No item is tabu from this trade on: the latest `tabu_until`.
    tabu_ends: u64,
    /// The last forced placements that pushed items out: (bin, until which trade). Every item
    /// still tabu was pushed out by one of them (each takes a trade, and tabu lasts
    /// `TABU_TENURE`), so a bin none of them names has no tabu item.
    tabu_kicks: [(u32, u64); TABU_TENURE as usize],
    tabu_kicks_next: usize,
    /// Whether bins known to have no helpful trade are passed, and the fast path taken in bins
    /// no tabu item names (`improve_with`).
    shortcuts: bool,
    /// The items of each bin, and the bin of each item. Bins `0..bins` are in use, of
    /// `contents.bins()` in all.
    contents: Bins,
    bins: usize,
    pool: Vec<u32>,
    pool_steps: u64,
    /// Every pool item and (while the pool is small) pair: (steps, first, second or NONE), by steps.
    pool_sets: Vec<weigh::Set>,
    /// `within[s]`: how many of `pool_sets` have at most `s` steps, and the fullest of them
    /// (empty for blocks of more than MAX_TABLE steps): one look-up where a binary search over
    /// the sets was the largest cost of the search. It finds the same place, so plans are the
    /// same.
    within: Vec<weigh::Within>,
    pool_changed: bool,
    /// Counts the pool's changes (at each refresh of `pool_sets`), and the bins found unhelpful
    /// against its present version.
    pool_version: u32,
    seen: seen::Seen,
    /// Bins the pool may fill (one fewer than were dissolved into it).
    spare: u32,
    /// The subset sum that splits the pool in two: its entries, the reachable sums (as entries)
    /// before and after adding an item, and the items of the first part.
    sums: Vec<(u32, u32, u32)>,
    reached: Vec<u32>,
    merged: Vec<u32>,
    split: Vec<u32>,
    /// The items of the bin a forced placement tries.
    scratch: Vec<bins::Slot>,
    trades: u64,
    work: u64,
    budget: u64,
    rng: PlanRng,
}

impl Search {
    /// The blocks of `packing` that take part (every block, or those with room), as bins.
    fn new(
        packing: &Packing,
        t_max: u32,
        items: usize,
        bins: usize,
        every_block: bool,
        budget: u64,
    ) -> Result<Self> {
        let pairs = MAX_POOL_FOR_PAIRS * (MAX_POOL_FOR_PAIRS - 1) / 2;
        let sums = MAX_SPLIT_SUMS.min(t_max as usize + 1);
        let mut search = Search {
            t_max,
            cap: u32::MAX,
            size: try_with_capacity("the lengths searched", items)?,
            tabu_bin: try_vec("the bin each length may not return to", items, NONE)?,
            tabu_until: try_vec("how long each length may not return", items, 0)?,
            tabu_ends: 0,
            tabu_kicks: [(NONE, 0); TABU_TENURE as usize],
            tabu_kicks_next: 0,
            shortcuts: true,
            contents: Bins::new(bins, items)?,
            bins: 0,
            pool: try_with_capacity("the pool of lengths", items)?,
            pool_steps: 0,
            pool_sets: try_with_capacity("the pool's lengths and pairs", items + pairs)?,
            within: if t_max <= MAX_TABLE {
                let within = weigh::Within::default();
                try_vec("the pool's sets up to each sum", t_max as usize + 1, within)?
            } else {
                Vec::new()
            },
            pool_changed: true,
            pool_version: 0,
            seen: seen::Seen::new()?,
            spare: 1,
            sums: try_with_capacity("the sums of the pool's parts", sums)?,
            reached: try_with_capacity("the sums the pool reaches", sums)?,
            merged: try_with_capacity("the sums the pool reaches", sums)?,
            split: try_with_capacity("a part of the pool", items)?,
            scratch: try_with_capacity("the lengths of a bin", items)?,
            trades: 0,
            work: 0,
            budget,
            rng: PlanRng::new(0, 0, Stream::Improve),
        };
        let mut bin = try_with_capacity("the bin of each length searched", items)?;
        let mut start = 0;
        for &end in &packing.ends {
            let block = &packing.lengths[start..end as usize];
            if every_block || block.iter().sum::<u32>() < t_max {
                search.size.extend_from_slice(block);
                bin.resize(search.size.len(), search.bins as u32);
                search.bins += 1;
            }
            start = end as usize;
        }
        search.lay_out(&bin);
        Ok(search)
    }

    /// Lays the bins out afresh from `bin` (each item's bin), each in the order of its items'
    /// indices; the pool is empty.
    fn lay_out(&mut self, bin: &[u32]) {
        self.contents.lay_out(bin, &self.size, self.bins);
        self.pool.clear();
        self.pool_steps = 0;
        self.pool_changed = true;
    }

    /// Takes one block off the bins at a time while the bound (`fewest` bins) allows one
    /// fewer; true if it took any. The bins are left as they were after the last success.
    fn run(&mut self, fewest: u64) -> Result<bool> {
        let mut saved = try_vec("the best bins found", self.size.len(), 0u32)?;
        saved.copy_from_slice(self.contents.all_bins());
        let mut saved_bins = self.bins;
        while self.bins as u64 > fewest.max(1) && self.work < self.budget {
            // Aim for one bin fewer: all but three bins (two if only two), and a pool that
            // fits in the others but one.
            let dissolved = self.bins.min(3);
            for _ in 0..dissolved {
                self.dissolve_emptiest();
            }
            self.spare = dissolved as u32 - 1;
            if !self.search() {
                break;
            }
            // The pool becomes a bin, or two (`split` in the first, the rest in the second).
            let needed = match (self.pool.is_empty(), self.split.is_empty()) {
                (true, _) => 0,
                (false, true) => 1,
                (false, false) => 2,
            };
            let first = self.bins as u32;
            for bin in self.bins..self.bins + needed {
                self.contents.clear(bin as u32);
            }
            for at in 0..self.split.len() {
                self.link(self.split[at], first);
            }
            for at in 0..self.pool.len() {
                let item = self.pool[at];
                if self.contents.bin_of(item) == NONE {
                    self.link(item, first + needed as u32 - 1);
                }
            }
            self.bins += needed;
            self.pool.clear();
            self.pool_steps = 0;
            self.pool_changed = true;
            saved.copy_from_slice(self.contents.all_bins());
            saved_bins = self.bins;
        }
        let better = saved_bins < self.contents.bins();
        self.bins = saved_bins;
        self.lay_out(&saved);
        Ok(better)
    }

    /// Trades until the pool fits in the spare bins (true) or the work runs out (false). Each
    /// sweep over the bins (from a random one) makes every trade that fills a bin more; after a
    /// sweep that finds none, a random pool item is forced into a random bin.
    fn search(&mut self) -> bool {
        loop {
            if self.pool_fits() {
                return true;
            }
            // (With no bin left, nothing can take a pool item.)
            if self.work >= self.budget || self.bins == 0 {
                return false;
            }
            let bins = self.bins as u32;
            let mut bin = self.rng.below(bins);
            let mut improved = false;
            let mut left = bins;
            while left > 0 {
                // Most bins are known to have no helpful trade: passed in a loop of their own.
                let passed = self.pass_known(bin, left);
                left -= passed;
                bin += passed;
                if bin >= bins {
                    bin -= bins;
                }
                if left == 0 {
                    break;
                }
                left -= 1;
                if let Some(trade) = self.best_trade(bin).filter(|trade| trade.score > 0) {
                    self.apply(bin, trade);
                    improved = true;
                    if self.work >= self.budget || self.pool_fits() {
                        break;
                    }
                }
                // The next bin, round from the last to the first (no division on this path).
                bin = if bin + 1 == bins { 0 } else { bin + 1 };
            }
            if !improved {
                self.kick();
            }
        }
    }

    /// Moves every item of the emptiest bin to the pool and takes the bin away.
    fn dissolve_emptiest(&mut self) {
        let contents = &self.contents;
        let emptiest = (0..self.bins as u32)
            .min_by_key(|&bin| contents.fill(bin))
            .unwrap_or(0);
        // The last bin takes its place.
        self.bins -= 1;
        let (pool, pool_steps) = (&mut self.pool, &mut self.pool_steps);
        self.contents
            .dissolve(emptiest, self.bins as u32, |item, steps| {
                pool.push(item);
                *pool_steps += u64::from(steps);
            });
        self.pool_changed = true;
    }

    fn link(&mut self, item: u32, bin: u32) {
        self.contents.link(item, self.size[item as usize], bin);
    }
}

/// Items among `items` (NONE: absent).
fn count_of(items: [u32; 2]) -> u32 {
    u32::from(items[0] != NONE) + u32::from(items[1] != NONE)
}

#[cfg(test)]
mod tests;
