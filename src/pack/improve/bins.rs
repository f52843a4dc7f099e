//! The bins of the improvement search, each a run of slots in one array.
//!
//! Every sweep reads every bin's lengths, many times over (weighing each trade of up to two for
//! up to two), and trades change few of them: the lengths of a bin lie together, with their
//! steps beside them, so that reading a bin is one short run of memory and not a walk from
//! length to length. A bin that outgrows its run moves to the end of the array, and the array is
//! compacted once that end is reached; its size is fixed up front.
//!
//! A bin's lengths are kept newest first. The order is part of the search: of trades that score
//! the same, the first weighed is taken, so the order decides which.

use super::NONE;
use crate::alloc::{try_vec, try_with_capacity};
use crate::error::Result;

/// A length in a bin: which one (its index in the search), and its steps.
#[derive(Clone, Copy, Default)]
pub(super) struct Slot {
    pub item: u32,
    pub steps: u32,
}

/// Where a bin's slots lie, its steps, and its lengths' key (together: a sweep reads them
/// together).
#[derive(Clone, Copy, Default)]
struct Run {
    start: u32,
    len: u32,
    room: u32,
    fill: u32,
    key: u64,
}

/// Bins of up to this many lengths, each under 2^15 steps, have a key.
const KEYED_LENGTHS: usize = 4;

/// The key of a bin holding `slots` (in any order): its lengths sorted, 15 bits each, below a
/// set top bit; 0 (no key) for an empty bin (as `Run::default()` has), more than
/// `KEYED_LENGTHS` lengths or one of 2^15 steps or more. Bins holding the same lengths, and
/// only those, have the same key.
fn key_of(slots: &[Slot]) -> u64 {
    if slots.is_empty() || slots.len() > KEYED_LENGTHS {
        return 0;
    }
    let mut sorted = [0u64; KEYED_LENGTHS];
    for (at, slot) in slots.iter().enumerate() {
        if slot.steps >= 1 << 15 {
            return 0;
        }
        sorted[at] = u64::from(slot.steps);
    }
    sorted.sort_unstable();
    sorted.iter().fold(1u64, |key, &steps| key << 15 | steps)
}

/// The lengths of every bin, and the bin of every length.
pub(super) struct Bins {
    runs: Vec<Run>,
    slots: Vec<Slot>,
    /// Per item: its bin (NONE: in none).
    bin: Vec<u32>,
    /// The bins in order of their runs, while compacting.
    order: Vec<u32>,
}

/// The room a bin of `len` slots is laid out with: twice that, so that it grows a while in place.
fn room_for(len: u32) -> u32 {
    2 * len.max(2)
}

impl Bins {
    /// Room for `bins` bins holding `items` lengths in all.
    pub fn new(bins: usize, items: usize) -> Result<Self> {
        // Laid out, the bins take at most `room_for` of each, `2 * items + 4 * bins` in all;
        // as much again leaves room to move any one bin (of at most all the items) to the end.
        let slots = 4 * items + 4 * bins + 8;
        Ok(Bins {
            runs: try_vec("the runs of the bins", bins, Run::default())?,
            slots: try_with_capacity("the lengths of the bins", slots)?,
            bin: try_vec("the bin of each length searched", items, NONE)?,
            order: try_with_capacity("the bins in order", bins)?,
        })
    }

    /// The bins there is room for.
    pub fn bins(&self) -> usize {
        self.runs.len()
    }

    /// The bin of `item` (NONE: in none).
    #[inline]
    pub fn bin_of(&self, item: u32) -> u32 {
        self.bin[item as usize]
    }

    /// The bin of every item (NONE: in none).
    pub fn all_bins(&self) -> &[u32] {
        &self.bin
    }

    /// The slots of `bin`, newest first.
    #[inline]
    pub fn slots(&self, bin: u32) -> &[Slot] {
        let run = self.runs[bin as usize];
        &self.slots[run.start as usize..(run.start + run.len) as usize]
    }

    /// The steps in `bin`.
    #[inline]
    pub fn fill(&self, bin: u32) -> u32 {
        self.runs[bin as usize].fill
    }

    /// The lengths in `bin`.
    #[inline]
    pub fn len(&self, bin: u32) -> u32 {
        self.runs[bin as usize].len
    }

    /// The lengths in `bin`, its steps and its lengths' key (see `key_of`; 0: none, kept as they
    /// change), in one read.
    #[inline]
    pub fn summary(&self, bin: u32) -> (u32, u32, u64) {
        let run = &self.runs[bin as usize];
        (run.len, run.fill, run.key)
    }

    fn update_key(&mut self, b: usize) {
        let run = self.runs[b];
        self.runs[b].key = key_of(&self.slots[run.start as usize..(run.start + run.len) as usize]);
    }

    /// Lays out bins `0..bins` afresh from `bin` (each item's bin, NONE: in none; indices below
    /// `bins`) and `steps`, each bin's items in the order of their indices.
    pub fn lay_out(&mut self, bin: &[u32], steps: &[u32], bins: usize) {
        self.bin.copy_from_slice(bin);
        self.runs.fill(Run::default());
        for &b in bin.iter().filter(|&&b| b != NONE) {
            self.runs[b as usize].len += 1;
        }
        let mut start = 0;
        for run in &mut self.runs[..bins] {
            run.start = start;
            run.room = room_for(run.len);
            start += run.room;
        }
        self.slots.clear();
        self.slots.resize(start as usize, Slot::default());
        // Each bin filled from the end of its items back, the last item first, so that they
        // lie in the order of their indices.
        for run in &mut self.runs[..bins] {
            run.start += run.len;
            run.len = 0;
        }
        for item in (0..bin.len()).rev() {
            let (b, steps) = (bin[item], steps[item]);
            if b == NONE {
                continue;
            }
            let item = item as u32;
            let run = &mut self.runs[b as usize];
            run.start -= 1;
            run.len += 1;
            run.fill += steps;
            self.slots[run.start as usize] = Slot { item, steps };
        }
        for b in 0..bins {
            self.update_key(b);
        }
    }

    /// `bin` afresh, with no lengths (it may have held some before, now elsewhere).
    pub fn clear(&mut self, bin: u32) {
        self.runs[bin as usize] = Run::default();
    }

    /// Puts `item` first in `bin`.
    pub fn link(&mut self, item: u32, steps: u32, bin: u32) {
        let b = bin as usize;
        if self.runs[b].len == self.runs[b].room {
            self.grow(b);
        }
        let run = &mut self.runs[b];
        let start = run.start as usize;
        self.slots
            .copy_within(start..start + run.len as usize, start + 1);
        self.slots[start] = Slot { item, steps };
        run.len += 1;
        run.fill += steps;
        self.bin[item as usize] = bin;
        self.update_key(b);
    }

    /// Takes `item` out of its bin, the others keeping their order.
    pub fn unlink(&mut self, item: u32) {
        let b = self.bin[item as usize] as usize;
        let run = &mut self.runs[b];
        let (start, end) = (run.start as usize, (run.start + run.len) as usize);
        let at = self.slots[start..end]
            .iter()
            .position(|slot| slot.item == item)
            .expect("an item is in its bin")
            + start;
        run.fill -= self.slots[at].steps;
        run.len -= 1;
        self.slots.copy_within(at + 1..end, at);
        self.bin[item as usize] = NONE;
        self.update_key(b);
    }

    /// Empties `bin` (its items first to last into `out`), and moves bin `last` into its place.
    pub fn dissolve(&mut self, bin: u32, last: u32, mut out: impl FnMut(u32, u32)) {
        for at in 0..self.len(bin) as usize {
            let slot = self.slots(bin)[at];
            self.bin[slot.item as usize] = NONE;
            out(slot.item, slot.steps);
        }
        self.runs[bin as usize].len = 0;
        self.runs[bin as usize].fill = 0;
        // One run per bin: `last`'s is now `bin`'s alone.
        self.runs[bin as usize] = std::mem::take(&mut self.runs[last as usize]);
        if bin != last {
            for at in 0..self.len(bin) as usize {
                let item = self.slots(bin)[at].item;
                self.bin[item as usize] = bin;
            }
        }
    }

    /// Moves bin `b`, full, to the end of the slots with twice its room, compacting them first if
    /// they have no room for it there.
    fn grow(&mut self, b: usize) {
        let room = room_for(self.runs[b].len) as usize;
        if self.slots.len() + room > self.slots.capacity() {
            self.compact();
        }
        // Compacted, the bins leave room to move any one of them (see `new`): no reallocation.
        debug_assert!(self.slots.len() + room <= self.slots.capacity());
        let run = self.runs[b];
        let start = self.slots.len();
        self.slots
            .extend_from_within(run.start as usize..(run.start + run.len) as usize);
        self.slots.resize(start + room, Slot::default());
        self.runs[b].start = start as u32;
        self.runs[b].room = room as u32;
    }

    /// Lays the runs out again in order, each with the room `lay_out` gives it: first packed
    /// down (each moves down or stays, so none is written before it is read), then spread back
    /// up from the last (each moves up or stays, past the packed ones before it).
    fn compact(&mut self) {
        self.order.clear();
        // Only bins that hold lengths keep a run; the others get one when they next take one.
        for (b, run) in (0u32..).zip(&mut self.runs) {
            if run.len == 0 {
                *run = Run::default();
            } else {
                self.order.push(b);
            }
        }
        let runs = &mut self.runs;
        self.order.sort_unstable_by_key(|&b| runs[b as usize].start);
        let mut end = 0u32;
        for &b in &self.order {
            let run = &mut runs[b as usize];
            let start = run.start as usize;
            self.slots
                .copy_within(start..start + run.len as usize, end as usize);
            run.start = end;
            end += run.len;
        }
        let spread: u32 = self
            .order
            .iter()
            .map(|&b| room_for(runs[b as usize].len))
            .sum();
        // (At most `2 * items + 4 * bins`, within the slots' capacity: no reallocation.)
        self.slots.resize(spread as usize, Slot::default());
        let mut top = spread;
        for &b in self.order.iter().rev() {
            let run = &mut runs[b as usize];
            let start = run.start as usize;
            run.room = room_for(run.len);
            top -= run.room;
            self.slots
                .copy_within(start..start + run.len as usize, top as usize);
            run.start = top;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `bins` as the lists they stand for (newest first) agree with `model`.
    fn check(bins: &Bins, model: &[Vec<(u32, u32)>]) {
        for (b, items) in (0u32..).zip(model) {
            let slots: Vec<_> = bins.slots(b).iter().map(|s| (s.item, s.steps)).collect();
            assert_eq!(&slots, items, "bin {b}");
            assert_eq!(
                bins.fill(b),
                items.iter().map(|&(_, steps)| steps).sum::<u32>()
            );
            let mut sorted: Vec<Slot> = bins.slots(b).to_vec();
            sorted.sort_unstable_by_key(|slot| std::cmp::Reverse(slot.steps));
            assert_eq!(bins.summary(b).2, key_of(&sorted));
            for &(item, _) in items {
                assert_eq!(bins.bin_of(item), b);
            }
        }
    }

    #[test]
    fn bins_holding_the_same_lengths_and_only_those_share_a_key() {
        let slots = |steps: &[u32]| -> Vec<Slot> {
            (0u32..)
                .zip(steps)
                .map(|(item, &steps)| Slot { item, steps })
                .collect()
        };
        let key = key_of(&slots(&[5, 300, 17]));
        assert_ne!(key, 0);
        assert_eq!(key_of(&slots(&[17, 5, 300])), key);
        assert_ne!(key_of(&slots(&[17, 5, 300, 1])), key);
        assert_ne!(key_of(&slots(&[5, 317])), key);
        assert_eq!(key_of(&slots(&[])), 0);
        assert_eq!(key_of(&slots(&[1, 2, 3, 4, 5])), 0);
        assert_eq!(key_of(&slots(&[1 << 15])), 0);
    }

    #[test]
    fn bins_keep_their_order_as_they_grow_move_and_compact() {
        // 40 items, all moved from bin to bin one at a time, newest first: each bin outgrows
        // its run many times over, far more than the slots hold without compacting.
        let (items, bins) = (40u32, 4);
        let mut store = Bins::new(bins, items as usize).unwrap();
        let steps: Vec<u32> = (0..items).map(|item| item % 7 + 1).collect();
        let first: Vec<u32> = (0..items).map(|item| item % 3).collect();
        store.lay_out(&first, &steps, bins);
        let mut model: Vec<Vec<(u32, u32)>> = vec![Vec::new(); bins];
        for item in 0..items {
            model[first[item as usize] as usize].push((item, steps[item as usize]));
        }
        check(&store, &model);
        let mut moved = 0;
        for round in 0..12u32 {
            let to = round % bins as u32;
            // From the middle of each bin, so that the others close up around the gap.
            for from in (0..bins as u32).filter(|&from| from != to) {
                while let Some(&(item, steps)) =
                    model[from as usize].get(model[from as usize].len() / 2)
                {
                    store.unlink(item);
                    model[from as usize].retain(|&(other, _)| other != item);
                    store.link(item, steps, to);
                    model[to as usize].insert(0, (item, steps));
                    moved += 1;
                }
            }
            check(&store, &model);
        }
        assert!(moved * 2 > store.slots.capacity());
        // The last bin takes the place of one dissolved.
        let mut out = Vec::new();
        store.dissolve(0, 3, |item, steps| out.push((item, steps)));
        assert_eq!(out, model[0]);
        model.swap_remove(0);
        check(&store, &model);
    }
}
