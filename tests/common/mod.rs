//! What the integration tests share: the bundled length sets (`data`), small hard sets
//! (`hard_sets`), lengths files written byte by byte (`lengths_files`), a bound on calls that
//! could block (`within`), and, for the property tests, random plan options over every policy,
//! both oversize modes and the costs blocks are dealt by (steps only for lanes, which refuse
//! others), with the ranges each test chooses for t_max and the world size.

pub mod data;
pub mod hard_sets;
pub mod lengths_files;
pub mod within;

use bload::{Cost, Options, Oversize, Policy};
use proptest::prelude::*;
use std::ops::RangeInclusive;

pub fn options_strategy(
    t_max: RangeInclusive<u32>,
    world_size: RangeInclusive<u32>,
) -> impl Strategy<Value = Options> {
    (
        t_max,
        1u32..=4,
        world_size,
        0..=bload::MAX_SEED,
        prop::sample::select(Policy::ALL.to_vec()),
        prop::bool::ANY,
        prop::sample::select(vec![
            Cost::Steps,
            Cost::Attention { linear: 0 },
            Cost::Attention { linear: 64 },
        ]),
        // No cap half the time; otherwise a tight one, which binds on most blocks.
        prop_oneof![1 => Just(None), 1 => (1u32..=6).prop_map(Some)],
    )
        .prop_map(
            |(t_max, blocks_per_batch, world_size, seed, policy, split, cost, cap)| Options {
                t_max,
                blocks_per_batch,
                world_size,
                seed,
                policy,
                oversize: if split {
                    Oversize::Split
                } else {
                    Oversize::Reject
                },
                cost: if policy.carries_state() {
                    Cost::Steps
                } else {
                    cost
                },
                // Lanes refuse a cap (their rows run sequences end to end).
                max_pieces: cap.filter(|_| !policy.carries_state()),
            },
        )
}
