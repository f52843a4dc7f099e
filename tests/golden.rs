//! Pins plan hashes, so a change to plans (packing, shuffling, sharding, the generator) is never
//! accidental. If a change is meant, update the hashes in the same commit and say why.

use bload::{read_lengths, Options, Oversize, Planner, Policy};
use std::path::PathBuf;

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
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/data/action_genome_like.lengths");
    let lengths = read_lengths(&path).unwrap();
    let mut options = Options::new(94);
    options.world_size = 8;
    assert_eq!(
        hash_of(lengths.clone(), options.clone(), 0),
        "0xe68ace9dde0b21db"
    );
    options.policy = Policy::RandomFill;
    assert_eq!(hash_of(lengths, options, 0), "0xb0ba8cfd87ec1128");
}
