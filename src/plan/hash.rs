//! Stable fingerprints: of the lengths a planner was made from, and of a whole plan.
//!
//! Ranks compare plan hashes to check they computed the same plan, and a saved position in an
//! epoch is checked against the lengths hash, so both must be the same on every machine and
//! release. They are FNV-1a over little-endian 64-bit words, fixed here, not `std`'s hasher,
//! whose output may change between releases. `tests/golden.rs` pins plan hashes.

use super::{EpochPlan, Planner};

impl Planner {
    /// A stable 64-bit fingerprint of the lengths (FNV-1a, like [`EpochPlan::hash`]): a saved
    /// position in an epoch is only meaningful for the same lengths.
    pub fn lengths_hash(&self) -> u64 {
        let mut hash = StableHash::new();
        hash.add(self.lengths.len() as u64);
        for &length in self.lengths.iter() {
            hash.add(u64::from(length));
        }
        hash.finish()
    }
}

impl EpochPlan {
    /// A stable 64-bit fingerprint of the plan's content (block size, shards, every piece of
    /// every block in order), so ranks can check they computed the same plan. It is FNV-1a,
    /// fixed here, not `std`'s hasher, whose output may change between releases.
    pub fn hash(&self) -> u64 {
        let mut hash = StableHash::new();
        let o = &self.options;
        hash.add(u64::from(o.t_max));
        hash.add(u64::from(o.world_size));
        hash.add(u64::from(o.blocks_per_batch));
        // Only when set, so that plans without a cap keep the hashes they always had.
        if let Some(cap) = o.max_pieces {
            hash.add(u64::from(cap) | 1 << 63);
        }
        hash.add(self.spans.len() as u64);
        for block in self.blocks() {
            hash.add(block.len() as u64);
            for piece in block.pieces() {
                hash.add(u64::from(piece.index) | u64::from(piece.offset) << 32);
                hash.add(u64::from(piece.length) | u64::from(piece.block_offset) << 32);
            }
        }
        hash.finish()
    }
}

/// The same stable hash over any words, for fingerprints kept outside the core (the C++
/// sampler's archive checksum), so that bload has one hash, pinned by the tests below.
pub fn stable_hash(words: &[u64]) -> u64 {
    let mut hash = StableHash::new();
    for &word in words {
        hash.add(word);
    }
    hash.finish()
}

struct StableHash(u64);

impl StableHash {
    fn new() -> Self {
        StableHash(0xcbf2_9ce4_8422_2325)
    }
    fn add(&mut self, word: u64) {
        for byte in word.to_le_bytes() {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Options;

    #[test]
    fn stable_hash_is_pinned() {
        // FNV-1a's offset basis when nothing is added.
        assert_eq!(stable_hash(&[]), 0xcbf2_9ce4_8422_2325);
        assert_eq!(stable_hash(&[1, 2, 3]), 0xda2b_fb22_5e0d_1f05);
        // Bytes go in little-endian order.
        assert_eq!(stable_hash(&[0x0102_0304_0506_0708]), 0x0c6d_4496_e178_59d5);
    }

    #[test]
    fn lengths_hash_is_pinned_and_depends_on_the_lengths_only() {
        let planner = Planner::new(vec![7, 3, 5], Options::new(10)).unwrap();
        assert_eq!(planner.lengths_hash(), 0x3a78_6e29_8731_2d27);
        assert_eq!(planner.lengths_hash(), stable_hash(&[3, 7, 3, 5]));
        let mut options = Options::new(12);
        options.seed = 9;
        let same = Planner::new(vec![7, 3, 5], options).unwrap();
        assert_eq!(same.lengths_hash(), planner.lengths_hash());
        let permuted = Planner::new(vec![3, 7, 5], Options::new(10)).unwrap();
        assert_ne!(permuted.lengths_hash(), planner.lengths_hash());
    }

    #[test]
    fn plan_hash_is_pinned_and_follows_the_content() {
        let lengths = vec![7, 3, 5, 5, 9, 1, 4, 6];
        let planner = Planner::new(lengths.clone(), Options::new(10)).unwrap();
        let plan = planner.plan(0).unwrap();
        assert_eq!(plan.hash(), 0xb9fd_0f09_79c2_2c78);
        assert_eq!(planner.plan(0).unwrap().hash(), plan.hash());
        // The shards are part of the plan: two ranks make another plan of the same lengths.
        let mut options = Options::new(10);
        options.world_size = 2;
        let sharded = Planner::new(lengths, options).unwrap().plan(0).unwrap();
        assert_ne!(sharded.hash(), plan.hash());
    }
}
