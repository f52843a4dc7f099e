//! What the property tests share: random plan options over every policy and both oversize
//! modes, with the ranges each test chooses for t_max and the world size.

use bload::{Options, Oversize, Policy};
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
        any::<u64>(),
        prop::sample::select(Policy::ALL.to_vec()),
        prop::bool::ANY,
    )
        .prop_map(
            |(t_max, blocks_per_batch, world_size, seed, policy, split)| Options {
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
            },
        )
}
