//! Best-fit decreasing on counts per length: lengths from longest to shortest, each into the
//! open block with the least room that still takes it. Part of the `best_fit` policy (see
//! `best_fit.rs`), for when filling one block at a time cannot reach the lower bound.

use super::{LengthPool, Packing};

pub(crate) fn best_fit_decreasing(counts: &[u32], t_max: u32) -> Packing {
    // Open blocks by fullness (steps used): `fullness.longest_at_most(t_max - len)` is the
    // fullest block that still takes `len`, i.e. the one with the least room that fits.
    let mut fullness = LengthPool::new(&vec![0; t_max as usize + 1]);
    let mut blocks_at: Vec<Vec<u32>> = vec![Vec::new(); t_max as usize + 1];
    let mut used: Vec<u32> = Vec::new();
    // (block, length) of every placement, in order.
    let mut placed: Vec<(u32, u32)> = Vec::with_capacity(counts.iter().map(|&c| c as usize).sum());
    for length in (1..=t_max).rev() {
        for _ in 0..counts[length as usize] {
            let block = match fullness.longest_at_most(t_max - length) {
                Some(full) => {
                    fullness.take(full);
                    blocks_at[full as usize].pop().expect("counted block")
                }
                None => {
                    used.push(0);
                    used.len() as u32 - 1
                }
            };
            let full = used[block as usize] + length;
            used[block as usize] = full;
            placed.push((block, length));
            if full < t_max {
                fullness.put_back(full);
                blocks_at[full as usize].push(block);
            }
        }
    }
    // Group the placements by block (a counting sort on the block number).
    let mut next = Vec::with_capacity(used.len());
    let mut ends = Vec::with_capacity(used.len());
    let mut pieces_per_block = vec![0u32; used.len()];
    for &(block, _) in &placed {
        pieces_per_block[block as usize] += 1;
    }
    let mut total = 0;
    for &pieces in &pieces_per_block {
        next.push(total);
        total += pieces;
        ends.push(total);
    }
    let mut lengths = vec![0; placed.len()];
    for &(block, length) in &placed {
        lengths[next[block as usize] as usize] = length;
        next[block as usize] += 1;
    }
    Packing { lengths, ends }
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
        let packing = best_fit_decreasing(&counts, 10);
        let blocks: Vec<&[u32]> = packing.blocks().collect();
        assert_eq!(blocks, vec![&[7, 3][..], &[6, 4][..]]);
    }
}
