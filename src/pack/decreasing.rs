//! Best-fit decreasing on counts per length: lengths from longest to shortest, each into the
//! open block with the least room that still takes it. Part of the `best_fit` policy (see
//! `best_fit.rs`), for when filling one block at a time cannot reach the lower bound.

use super::{item_count, LengthPool, Packing};
use crate::alloc::{try_vec, try_with_capacity};
use crate::error::Result;

/// No block: the end of a stack of blocks.
const NONE: u32 = u32::MAX;

/// At most `cap` items a block (`u32::MAX`: no cap): a block that reaches it takes no more.
pub(crate) fn best_fit_decreasing(counts: &[u32], t_max: u32, cap: u32) -> Result<Packing> {
    // Every block opens with an item: there are at most as many blocks as items, and each
    // per-block table is allocated at that size.
    let items = item_count(counts);
    // Open blocks by fullness (steps used): `fullness.longest_at_most(t_max - len)` is the
    // fullest block that still takes `len`, i.e. the one with the least room that fits.
    let mut fullness = LengthPool::empty(t_max as usize)?;
    // The open blocks of each fullness, as stacks threaded through the blocks: `top[full]` is
    // the last pushed (or NONE), `below[block]` the block pushed before `block`.
    let mut top = try_vec("the open blocks of each fullness", t_max as usize + 1, NONE)?;
    let mut below = try_vec("the stacks of open blocks", items, NONE)?;
    let mut used: Vec<u32> = try_with_capacity("the steps used in each block", items)?;
    let mut pieces_per_block: Vec<u32> = try_with_capacity("the pieces of each block", items)?;
    // (block, length) of every placement, in order.
    let mut placed: Vec<(u32, u32)> = try_with_capacity("the placements", items)?;
    for length in (1..=t_max).rev() {
        for _ in 0..counts[length as usize] {
            let block = match fullness.longest_at_most(t_max - length) {
                Some(full) => {
                    fullness.take(full);
                    let block = top[full as usize];
                    debug_assert_ne!(block, NONE, "a block is counted at fullness {full}");
                    top[full as usize] = below[block as usize];
                    block
                }
                None => {
                    used.push(0);
                    pieces_per_block.push(0);
                    used.len() as u32 - 1
                }
            };
            let full = used[block as usize] + length;
            used[block as usize] = full;
            pieces_per_block[block as usize] += 1;
            placed.push((block, length));
            if full < t_max && pieces_per_block[block as usize] < cap {
                fullness.put_back(full);
                below[block as usize] = top[full as usize];
                top[full as usize] = block;
            }
        }
    }
    // Group the placements by block (a counting sort on the block number).
    let blocks = used.len();
    let mut next = try_with_capacity("the next placement of each block", blocks)?;
    let mut ends = try_with_capacity("the ends of the packed blocks", blocks)?;
    let mut total = 0;
    for &pieces in &pieces_per_block {
        next.push(total);
        total += pieces;
        ends.push(total);
    }
    let mut lengths = try_vec("the packed lengths", placed.len(), 0)?;
    for &(block, length) in &placed {
        lengths[next[block as usize] as usize] = length;
        next[block as usize] += 1;
    }
    Ok(Packing { lengths, ends })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_each_length_in_the_fullest_block_that_takes_it() {
        // Blocks of 10: 7 and 6 open two blocks; 3 goes with 7 (room 3), 4 with 6 (room 4).
        let mut counts = vec![0u32; 11];
        for length in [7, 6, 4, 3] {
            counts[length] += 1;
        }
        let packing = best_fit_decreasing(&counts, 10, u32::MAX).unwrap();
        let blocks: Vec<&[u32]> = packing.blocks().collect();
        assert_eq!(blocks, vec![&[7, 3][..], &[6, 4][..]]);
    }

    #[test]
    fn a_block_at_the_cap_takes_no_more() {
        // Blocks of 10, one item each: the 3 cannot join the 4 however much room is left.
        let mut counts = vec![0u32; 11];
        for length in [4, 3] {
            counts[length] += 1;
        }
        let packing = best_fit_decreasing(&counts, 10, 1).unwrap();
        let blocks: Vec<&[u32]> = packing.blocks().collect();
        assert_eq!(blocks, vec![&[4][..], &[3][..]]);
    }
}
