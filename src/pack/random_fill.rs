//! `random_fill`, the BLoad paper's packing: each block takes randomly drawn sequences that still
//! fit until none does, then pads the rest. Every draw is uniform over the remaining sequences
//! that fit, found through a Fenwick tree of counts per length.

use super::{most_blocks_closed_when_full, Packing};
use crate::alloc::try_copy;
use crate::error::Result;
use crate::rng::PlanRng;

/// At most `cap` sequences a block (`u32::MAX`: no cap): a block full of them closes like a
/// block that no remaining sequence fits.
pub(crate) fn random_fill(
    counts: &[u32],
    t_max: u32,
    cap: u32,
    rng: &mut PlanRng,
) -> Result<Packing> {
    let mut tree = CountTree::new(counts)?;
    let blocks = most_blocks_closed_when_full(counts, t_max, cap);
    let mut packing = Packing::for_items(counts, blocks)?;
    loop {
        let mut room = t_max;
        let mut pieces = 0;
        while pieces < cap {
            pieces += 1;
            let fitting = tree.count_at_most(room);
            if fitting == 0 {
                break;
            }
            let length = tree.kth_length(rng.below(fitting));
            tree.remove(length);
            packing.lengths.push(length);
            room -= length;
        }
        if room == t_max {
            return Ok(packing);
        }
        packing.close_block();
    }
}

/// Fenwick tree over lengths 1..=t_max: prefix counts and rank selection in O(log t_max).
struct CountTree {
    tree: Vec<u32>,
    top_power: usize,
}

impl CountTree {
    fn new(counts: &[u32]) -> Result<Self> {
        let mut tree = try_copy("the tree of counts per length", counts)?;
        for index in 1..tree.len() {
            let parent = index + (index & index.wrapping_neg());
            if parent < tree.len() {
                tree[parent] += tree[index];
            }
        }
        let top_power = if tree.len() > 1 {
            1 << (usize::BITS - 1 - (tree.len() - 1).leading_zeros())
        } else {
            0
        };
        Ok(CountTree { tree, top_power })
    }

    fn count_at_most(&self, length: u32) -> u32 {
        let mut index = (length as usize).min(self.tree.len() - 1);
        let mut sum = 0;
        while index > 0 {
            sum += self.tree[index];
            index &= index - 1;
        }
        sum
    }

    /// The length of the `rank`-th remaining item (0-based) in order of length.
    fn kth_length(&self, mut rank: u32) -> u32 {
        let mut index = 0;
        let mut step = self.top_power;
        while step > 0 {
            let next = index + step;
            if next < self.tree.len() && self.tree[next] <= rank {
                index = next;
                rank -= self.tree[next];
            }
            step /= 2;
        }
        index as u32 + 1
    }

    fn remove(&mut self, length: u32) {
        let mut index = length as usize;
        while index < self.tree.len() {
            self.tree[index] -= 1;
            index += index & index.wrapping_neg();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Stream;

    #[test]
    fn count_tree_counts_and_selects() {
        // Lengths 2, 2, 5, 7 in a tree over 1..=8.
        let mut counts = vec![0u32; 9];
        counts[2] = 2;
        counts[5] = 1;
        counts[7] = 1;
        let mut tree = CountTree::new(&counts).unwrap();
        assert_eq!(tree.count_at_most(1), 0);
        assert_eq!(tree.count_at_most(4), 2);
        assert_eq!(tree.count_at_most(8), 4);
        let picks: Vec<u32> = (0..4).map(|rank| tree.kth_length(rank)).collect();
        assert_eq!(picks, vec![2, 2, 5, 7]);
        tree.remove(2);
        assert_eq!(tree.kth_length(1), 5);
        assert_eq!(tree.count_at_most(6), 2);
    }

    #[test]
    fn blocks_fit_and_no_block_could_take_one_more() {
        let mut counts = vec![0u32; 21];
        for length in [3, 3, 4, 9, 12, 1, 1, 17, 20, 6, 8, 8, 5] {
            counts[length] += 1;
        }
        let mut rng = PlanRng::new(0, 0, Stream::RandomFill);
        let packing = random_fill(&counts, 20, u32::MAX, &mut rng).unwrap();
        assert_eq!(packing.lengths.len(), 13);
        let blocks: Vec<&[u32]> = packing.blocks().collect();
        for (k, block) in blocks.iter().enumerate() {
            let room = 20 - block.iter().sum::<u32>();
            // When block k closed, nothing left fitted into it: every later length is too long.
            let later = blocks[k + 1..].iter().flat_map(|b| b.iter());
            assert!(later.copied().all(|length| length > room), "{blocks:?}");
        }
        // Two a block at most: every block closes at two unless nothing more fits.
        let mut rng = PlanRng::new(0, 0, Stream::RandomFill);
        let capped = random_fill(&counts, 20, 2, &mut rng).unwrap();
        assert_eq!(capped.lengths.len(), 13);
        assert!(capped.blocks().all(|block| block.len() <= 2));
    }
}
