//! The planner's only source of randomness. ChaCha8 is a specified stream cipher, and the integer
//! sampling and shuffling below are written here rather than taken from `rand`, whose algorithms
//! may change between releases: a (seed, epoch) gives the same plan on every machine, forever.

use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::prefetch::prefetch;

/// Independent random streams of one epoch, so that a change to one use never shifts another.
#[derive(Clone, Copy)]
pub(crate) enum Stream {
    /// Which sequence of a given length fills a slot of that length.
    Identities = 1,
    /// The order of blocks, and so which rank and batch each lands in.
    BlockOrder = 2,
    /// The draws of the `random_fill` policy.
    RandomFill = 3,
    /// The random choices of `best_fit`'s improvement search (`pack/improve.rs`), drawn with
    /// seed and epoch 0: the packing depends on the lengths alone, not on the seed or epoch.
    Improve = 4,
    /// The `lanes` policy's deal: ties, lane numbers and the order inside each lane.
    Lanes = 5,
    /// Dealing blocks to ranks by cost (`plan/balance.rs`): rank rotations and the order of
    /// global batches.
    CostDeal = 6,
    /// A mixture's choice of each epoch's sequences (`plan/mixture.rs`), one part per source.
    Mixture = 7,
}

pub(crate) struct PlanRng(ChaCha8Rng);

impl PlanRng {
    pub(crate) fn new(seed: u64, epoch: u64, stream: Stream) -> Self {
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        key[8..16].copy_from_slice(&epoch.to_le_bytes());
        key[16..24].copy_from_slice(b"bload-v1");
        let mut rng = ChaCha8Rng::from_seed(key);
        rng.set_stream(stream as u64);
        PlanRng(rng)
    }

    /// Part `part` of `stream`: streams that several independent users share (a mixture's
    /// sources), so that one user's draws never shift another's. Part 0 is `stream` itself.
    pub(crate) fn for_part(seed: u64, epoch: u64, stream: Stream, part: u64) -> Self {
        let mut rng = PlanRng::new(seed, epoch, stream);
        rng.0.set_stream(stream as u64 | part << 8);
        rng
    }

    /// A uniform integer in `0..n` (`n > 0`), by Lemire's multiply-and-reject method.
    pub(crate) fn below(&mut self, n: u32) -> u32 {
        debug_assert!(n > 0);
        let mut product = u64::from(self.0.next_u32()) * u64::from(n);
        if (product as u32) < n {
            let threshold = n.wrapping_neg() % n;
            while (product as u32) < threshold {
                product = u64::from(self.0.next_u32()) * u64::from(n);
            }
        }
        (product >> 32) as u32
    }

    /// Fisher-Yates shuffle. Slices handed to it hold fewer than 2^32 items (the planner checks
    /// that an epoch's blocks, the most items it shuffles, fit 32-bit positions).
    ///
    /// Slices larger than the caches take [`PlanRng::shuffle_ahead`]'s path, [`SHUFFLE_AHEAD`]
    /// swaps ahead; smaller ones, where drawing early gains nothing, swap by swap.
    pub(crate) fn shuffle<T>(&mut self, items: &mut [T]) {
        if std::mem::size_of_val(items) < CACHED_BYTES {
            for last in (1..items.len()).rev() {
                let pick = self.below(last as u32 + 1) as usize;
                items.swap(last, pick);
            }
        } else {
            self.shuffle_ahead::<SHUFFLE_AHEAD>(items);
        }
    }

    /// [`PlanRng::shuffle`]'s permutation, each pick drawn `AHEAD` swaps before its swap (from
    /// the same stream, in the same order) and its item asked of memory then: on a slice larger
    /// than the caches each swap would otherwise wait for memory in turn, where this way many
    /// loads are in flight at once. `AHEAD` is a power of two (a cheap `%`), chosen per use:
    /// further for items nearer in memory.
    pub(crate) fn shuffle_ahead<const AHEAD: usize>(&mut self, items: &mut [impl Sized]) {
        let len = items.len();
        let places = len.saturating_sub(1);
        // `picks[k % AHEAD]`: the pick of step `k`, which swaps place `len - 1 - k`.
        let mut picks = [0u32; AHEAD];
        let draw = |rng: &mut Self, k: usize, items: &[_]| {
            let pick = rng.below((len - k) as u32);
            prefetch(items, pick as usize);
            pick
        };
        for (k, pick) in picks.iter_mut().enumerate().take(places) {
            *pick = draw(self, k, items);
        }
        for k in 0..places {
            let pick = picks[k % AHEAD] as usize;
            if k + AHEAD < places {
                picks[k % AHEAD] = draw(self, k + AHEAD, items);
            }
            items.swap(len - 1 - k, pick);
        }
    }
}

/// How far ahead [`PlanRng::shuffle`] draws on slices larger than the caches. On the 8.1M
/// blocks of Graphcore's Wikipedia histogram (16 bytes each), the block order's shuffle took
/// 55, 40, 29.5, 26.2 and 26.5 ms drawing 16, 32, 64, 128 and 256 ahead (three plans each).
const SHUFFLE_AHEAD: usize = 128;
/// Slices of fewer bytes stay in the caches, where drawing early gains nothing.
const CACHED_BYTES: usize = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_reproducible_and_distinct() {
        let draw = |seed, epoch, stream| {
            let mut rng = PlanRng::new(seed, epoch, stream);
            (0..8).map(|_| rng.below(1000)).collect::<Vec<_>>()
        };
        let base = draw(1, 2, Stream::Identities);
        assert_eq!(base, draw(1, 2, Stream::Identities));
        for other in [
            draw(1, 3, Stream::Identities),
            draw(2, 2, Stream::Identities),
            draw(1, 2, Stream::BlockOrder),
        ] {
            assert_ne!(base, other);
        }
    }

    #[test]
    fn chacha_stream_is_pinned() {
        // Pins the generator itself: if a dependency update changed the stream, plans would change.
        let mut rng = PlanRng::new(0, 0, Stream::Identities);
        let draws: Vec<u32> = (0..4).map(|_| rng.below(1 << 31)).collect();
        assert_eq!(draws, PINNED_DRAWS);
    }
    const PINNED_DRAWS: [u32; 4] = [1823832508, 603628936, 300141151, 1427351478];

    #[test]
    fn below_is_in_range_and_covers_it() {
        let mut rng = PlanRng::new(7, 0, Stream::RandomFill);
        let mut seen = [0u32; 7];
        for _ in 0..7000 {
            seen[rng.below(7) as usize] += 1;
        }
        assert!(seen.iter().all(|&count| count > 800), "{seen:?}");
    }

    #[test]
    fn shuffle_is_a_permutation() {
        let mut rng = PlanRng::new(3, 1, Stream::BlockOrder);
        let mut items: Vec<u32> = (0..100).collect();
        rng.shuffle(&mut items);
        assert_ne!(items, (0..100).collect::<Vec<_>>());
        items.sort_unstable();
        assert_eq!(items, (0..100).collect::<Vec<_>>());
    }

    /// Plain Fisher-Yates, as `shuffle` did before it drew ahead on large slices.
    fn swap_by_swap<T>(rng: &mut PlanRng, items: &mut [T]) {
        for last in (1..items.len()).rev() {
            let pick = rng.below(last as u32 + 1) as usize;
            items.swap(last, pick);
        }
    }

    #[test]
    fn drawing_ahead_shuffles_as_swap_by_swap() {
        // Sizes about the threshold, and some whose count is not a multiple of SHUFFLE_AHEAD.
        let threshold = CACHED_BYTES / 4;
        for n in [
            threshold - 1,
            threshold,
            threshold + 1,
            threshold + 37,
            3 * threshold + 5,
        ] {
            let mut ahead: Vec<u32> = (0..n as u32).collect();
            let mut plain = ahead.clone();
            PlanRng::new(9, 4, Stream::Identities).shuffle(&mut ahead);
            swap_by_swap(&mut PlanRng::new(9, 4, Stream::Identities), &mut plain);
            assert_eq!(ahead, plain, "{n} items");
            // The stream is left where swap-by-swap leaves it.
            let mut after = PlanRng::new(9, 4, Stream::Identities);
            after.shuffle(&mut ahead);
            let mut after_plain = PlanRng::new(9, 4, Stream::Identities);
            swap_by_swap(&mut after_plain, &mut plain);
            assert_eq!(after.below(1000), after_plain.below(1000), "{n} items");
        }
    }

    #[test]
    fn shuffles_ahead_are_the_plain_shuffle() {
        // Lengths shorter than each window of picks, as long, and longer.
        for len in [0u32, 1, 2, 63, 64, 65, 255, 256, 257, 1000] {
            let plain = |seed| {
                let mut items: Vec<u32> = (0..len).collect();
                swap_by_swap(&mut PlanRng::new(seed, 0, Stream::Lanes), &mut items);
                items
            };
            let mut near: Vec<u32> = (0..len).collect();
            PlanRng::new(1, 0, Stream::Lanes).shuffle_ahead::<64>(&mut near);
            assert_eq!(near, plain(1), "{len} items");
            let mut far: Vec<u32> = (0..len).collect();
            PlanRng::new(2, 0, Stream::Lanes).shuffle_ahead::<256>(&mut far);
            assert_eq!(far, plain(2), "{len} items");
        }
    }
}
