//! Pins plan hashes, so a change to plans (packing, shuffling, sharding, the generator) is never
//! accidental. If a change is meant, update the hashes in the same commit and say why.

use crate::common::data;

use bload::{Options, Oversize, Planner, Policy};
use data::data;

fn hash_of(lengths: Vec<u32>, options: Options, epoch: u64) -> String {
    format!(
        "{:#018x}",
        Planner::new(lengths, options)
            .unwrap()
            .plan(epoch)
            .unwrap()
            .hash()
    )
}

#[test]
fn small_input_plan_hashes_are_pinned() {
    let lengths = vec![7, 3, 12, 5, 5, 9, 1, 4, 6, 11, 2, 8, 25];
    let mut options = Options::new(10);
    options.world_size = 2;
    options.blocks_per_batch = 2;
    options.seed = 42;
    options.oversize = Oversize::Split;
    assert_eq!(
        hash_of(lengths.clone(), options.clone(), 0),
        "0xfd522b6ec9a268ae"
    );
    assert_eq!(
        hash_of(lengths.clone(), options.clone(), 1),
        "0x351e482fad8f7b4e"
    );
    options.policy = Policy::RandomFill;
    assert_eq!(
        hash_of(lengths.clone(), options.clone(), 0),
        "0x15c788dda71ba08a"
    );
    options.policy = Policy::Lanes;
    assert_eq!(hash_of(lengths, options, 0), "0xb950ab84a88f0eca");
}

#[test]
fn action_genome_plan_hashes_are_pinned() {
    let lengths = data("action_genome_like.lengths");
    let mut options = Options::new(94);
    options.world_size = 8;
    assert_eq!(
        hash_of(lengths.clone(), options.clone(), 0),
        "0xe68ace9dde0b21db"
    );
    options.policy = Policy::RandomFill;
    assert_eq!(hash_of(lengths, options, 0), "0xb0ba8cfd87ec1128");
}

/// Plans under a cap on the pieces a block holds. Pinned when small caps were first packed in
/// length space (issue 38): at a cap of 3, 2,520 blocks where filling each block from its
/// longest length made 2,656; at 4, 1,928 where it made 2,200; at 12, as before.
#[test]
fn capped_plan_hashes_are_pinned() {
    let lengths = data("action_genome_like.lengths");
    let capped = |cap| {
        let mut options = Options::new(94);
        options.world_size = 8;
        options.oversize = Oversize::Split;
        options.max_pieces = Some(cap);
        options
    };
    let pinned = [
        (2, "0xa7b402548eae0c97"),
        (3, "0x143bef40d76ac65a"),
        (4, "0x89e93f115ac3b1b5"),
        (12, "0x2c8770235b6e7d23"),
    ];
    for (cap, hash) in pinned {
        assert_eq!(hash_of(lengths.clone(), capped(cap), 0), hash, "cap {cap}");
    }
}

/// Lanes plans of the bundled sets and of shapes that take each path of the deal
/// (`src/plan/deal.rs`): many lanes, one sequence far longer than the rest, lengths spread over
/// more than 2^16 values, every length equal. Pinned before the deal was made fast (issue 26),
/// which had to keep every plan as it was.
#[test]
fn lanes_plan_hashes_are_pinned() {
    let lanes = |t_max, world_size, blocks_per_batch, seed| {
        let mut options = Options::new(t_max);
        options.world_size = world_size;
        options.blocks_per_batch = blocks_per_batch;
        options.seed = seed;
        options.policy = Policy::Lanes;
        options
    };
    let mut giant = vec![10_000_000];
    giant.extend((0..20_000u32).map(|i| 1 + i * 7 % 300));
    let spread: Vec<u32> = (0..50_000u64)
        .map(|i| 1 + (i * 2_654_435_761 % 200_000) as u32)
        .collect();
    let cases = [
        (data("text_like.lengths"), lanes(2048, 8, 4, 3), 1),
        (data("speech_like.lengths"), lanes(2450, 8, 8, 0), 0),
        (data("action_genome_like.lengths"), lanes(94, 2, 4, 5), 2),
        (data("text_like.lengths"), lanes(512, 40, 25, 1), 0),
        (giant, lanes(256, 4, 2, 7), 0),
        (spread, lanes(4096, 4, 4, 11), 3),
        (vec![37; 10_000], lanes(100, 3, 5, 2), 0),
    ];
    let hashes: Vec<String> = cases
        .into_iter()
        .map(|(lengths, options, epoch)| hash_of(lengths, options, epoch))
        .collect();
    assert_eq!(
        hashes,
        [
            "0xc49a438190ad6119",
            "0xeb3bf69c00752aed",
            "0x895309a3c1c1b045",
            "0xd8fe3d1297395941",
            "0xb8118492400ccbc2",
            "0x4c51cfe3c530b438",
            "0xe28fa18285947d48",
        ]
    );
}
