//! How many blocks best-fit decreasing (`decreasing.rs`) packs, found without placing each item.
//!
//! `best_fit` runs best-fit decreasing only in case it beats the fill's packing, which on large
//! sets it rarely does (Graphcore's Wikipedia histogram: 8,138,483 blocks against the fill's
//! 8,135,729). Placing its 16M items one at a time, and then grouping them by block, was most of
//! that plan's time; its block count alone is enough to know which packing to keep, and only a
//! winning packing is then placed item by item.
//!
//! Best-fit decreasing's choices depend on little. The items of one length go, one at a time, to
//! the fullest open block that takes one more (the top block of that fullness's stack), or to a
//! new block when none does. Once such a block has taken one, it is still the fullest that takes
//! one (it is fuller, and nothing else changed), so it takes them until it has no room for another
//! or reaches the cap; then the next block of the stack does the same. What a block does later
//! depends only on its fullness and its number of items, so each stack is kept as runs of like
//! blocks, (items, blocks) groups, and the items of a length fill a whole group at a time: the
//! same blocks at the same fullnesses as placing them one by one. Without a cap the number of
//! items never matters (it is kept as 0), and each fullness holds one group at most.

use super::LengthPool;
use crate::alloc::{try_push, try_vec};
use crate::error::Result;

/// No group: the bottom of a stack, or the end of the free list.
const NONE: u32 = u32::MAX;

/// Like blocks lying together in a stack: `blocks` open blocks of the stack's fullness, each
/// with `items` items, above group `below`.
#[derive(Clone, Copy)]
struct Group {
    items: u32,
    blocks: u32,
    below: u32,
}

/// The open blocks, as stacks of groups, one stack per fullness.
struct Stacks {
    /// The open blocks of each fullness: `longest_at_most(room)` is the fullest that leaves
    /// `t_max - room` or more.
    fullness: LengthPool,
    /// The top group of each fullness's stack (or NONE).
    top: Vec<u32>,
    /// Every group, in use or free.
    groups: Vec<Group>,
    /// The first free group, the rest linked through `below`.
    free: u32,
}

impl Stacks {
    fn new(t_max: u32) -> Result<Self> {
        Ok(Stacks {
            fullness: LengthPool::empty(t_max as usize)?,
            top: try_vec("the open blocks of each fullness", t_max as usize + 1, NONE)?,
            groups: Vec::new(),
            free: NONE,
        })
    }

    /// The top group of fullness `full`'s stack (which holds a block).
    fn top(&self, full: u32) -> Group {
        self.groups[self.top[full as usize] as usize]
    }

    /// `blocks` blocks of `items` items each, pushed onto fullness `full`'s stack.
    fn push(&mut self, full: u32, items: u32, blocks: u32) -> Result<()> {
        let top = self.top[full as usize];
        self.fullness.put_back_many(full, blocks);
        if top != NONE && self.groups[top as usize].items == items {
            self.groups[top as usize].blocks += blocks;
            return Ok(());
        }
        let group = Group {
            items,
            blocks,
            below: top,
        };
        let at = if self.free == NONE {
            try_push(&mut self.groups, "the groups of open blocks", group)?;
            self.groups.len() as u32 - 1
        } else {
            let at = self.free;
            self.free = self.groups[at as usize].below;
            self.groups[at as usize] = group;
            at
        };
        self.top[full as usize] = at;
        Ok(())
    }

    /// `blocks` blocks (at most its top group's) popped off fullness `full`'s stack.
    fn pop(&mut self, full: u32, blocks: u32) {
        let at = self.top[full as usize];
        self.fullness.take_many(full, blocks);
        let group = &mut self.groups[at as usize];
        group.blocks -= blocks;
        if group.blocks == 0 {
            self.top[full as usize] = group.below;
            group.below = self.free;
            self.free = at;
        }
    }
}

/// The number of blocks `best_fit_decreasing(counts, t_max, cap)` packs.
pub(crate) fn best_fit_decreasing_blocks(counts: &[u32], t_max: u32, cap: u32) -> Result<u64> {
    let capped = cap != u32::MAX;
    let mut stacks = Stacks::new(t_max)?;
    let mut opened = 0u64;
    for length in (1..=t_max).rev() {
        let mut left = counts[length as usize];
        while left > 0 {
            // The fullest open blocks that take one more, or new ones (as many as it takes).
            let fullest = stacks.fullness.longest_at_most(t_max - length);
            let (full, items, available) = match fullest {
                Some(full) => {
                    let group = stacks.top(full);
                    (full, group.items, u64::from(group.blocks))
                }
                None => (0, 0, u64::MAX),
            };
            // Each block takes as many as its room holds, within the cap (at least one: it
            // has the room, and a block at the cap is in no stack).
            let each = ((t_max - full) / length).min(cap - items);
            let whole = u64::from(left / each).min(available) as u32;
            left -= whole * each;
            // The last block of the length may take fewer, and ends it.
            let partial = if left > 0 && u64::from(whole) < available {
                std::mem::take(&mut left)
            } else {
                0
            };
            let touched = whole + u32::from(partial > 0);
            match fullest {
                Some(full) => stacks.pop(full, touched),
                None => opened += u64::from(touched),
            }
            for (blocks, taken) in [(whole, each), (u32::from(partial > 0), partial)] {
                let now_full = full + taken * length;
                let now_items = if capped { items + taken } else { 0 };
                if blocks > 0 && now_full < t_max && (!capped || now_items < cap) {
                    stacks.push(now_full, now_items, blocks)?;
                }
            }
        }
    }
    Ok(opened)
}

#[cfg(test)]
mod tests {
    use super::super::best_fit_decreasing;
    use super::*;
    use crate::rng::{PlanRng, Stream};

    /// The count is that of the packing placed item by item, on random sets: few or many
    /// lengths, short or long ones, large counts, with and without caps.
    #[test]
    fn counts_the_blocks_best_fit_decreasing_packs() {
        let mut rng = PlanRng::new(5, 0, Stream::RandomFill);
        for case in 0..600u32 {
            let t_max = 1 + rng.below([8, 40, 300][case as usize % 3]);
            let mut counts = vec![0u32; t_max as usize + 1];
            let lengths = 1 + rng.below(12);
            for _ in 0..lengths {
                let length = 1 + rng.below(t_max);
                counts[length as usize] += rng.below([3, 30, 2000][case as usize / 3 % 3]);
            }
            let cap = match case % 4 {
                0 => u32::MAX,
                1 => 1 + rng.below(2),
                2 => 2 + rng.below(6),
                _ => 1 + rng.below(40),
            };
            let placed = best_fit_decreasing(&counts, t_max, cap).unwrap();
            assert_eq!(
                best_fit_decreasing_blocks(&counts, t_max, cap).unwrap(),
                placed.ends.len() as u64,
                "case {case}: t_max {t_max}, cap {cap}, counts {counts:?}"
            );
        }
    }

    #[test]
    fn nothing_to_pack_is_no_block() {
        assert_eq!(best_fit_decreasing_blocks(&[0; 11], 10, 3).unwrap(), 0);
    }
}
