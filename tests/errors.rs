//! Bad input gets an error naming the argument, the value and what was expected: never a panic
//! and never a wrong plan.

use bload::{Options, Oversize, Planner};

fn refusal(lengths: Vec<u32>, edit: impl FnOnce(&mut Options)) -> bload::Error {
    let mut options = Options::new(10);
    edit(&mut options);
    Planner::new(lengths, options).expect_err("should be refused")
}

#[test]
fn empty_dataset() {
    let err = refusal(vec![], |_| {});
    assert_eq!(
        err.to_string(),
        "lengths = an empty list: expected at least one sequence"
    );
}

#[test]
fn zero_length_sequences_name_the_first_and_count_them() {
    let err = refusal(vec![3, 0, 4, 0], |_| {});
    assert_eq!(err.argument, "lengths[1]");
    assert_eq!(err.value, "0");
    assert!(err.expected.contains("2 have 0"), "{err}");
}

#[test]
fn zero_options() {
    assert_eq!(refusal(vec![3], |o| o.t_max = 0).argument, "t_max");
    assert_eq!(
        refusal(vec![3], |o| o.world_size = 0).argument,
        "world_size"
    );
    assert_eq!(
        refusal(vec![3], |o| o.blocks_per_batch = 0).argument,
        "blocks_per_batch"
    );
}

#[test]
fn more_pieces_than_32_bit_positions() {
    // Totals over 32 bits are planned (tests/epochs.rs); pieces past 32-bit positions are not:
    // two sequences of 2^32 - 1 steps cut into 1-step chunks.
    let err = refusal(vec![u32::MAX, u32::MAX], |o| {
        o.t_max = 1;
        o.oversize = Oversize::Split;
    });
    assert_eq!(err.argument, "pieces");
    assert_eq!(err.value, "8589934590");
    assert!(err.expected.contains("raise t_max"), "{err}");
}

#[test]
fn sequences_longer_than_t_max_say_how_many_and_the_longest() {
    let err = refusal(vec![3, 12, 40, 9], |_| {});
    assert_eq!(err.argument, "t_max");
    assert_eq!(err.value, "10");
    assert!(
        err.expected.contains("(40 steps): 2 sequences are longer"),
        "{err}"
    );
    assert!(err.expected.contains("split"), "{err}");
}

#[test]
fn fewer_pieces_than_the_blocks_of_a_global_batch() {
    let err = refusal(vec![3, 4], |o| o.world_size = 3);
    assert_eq!(err.to_string(), "world_size = 3: expected at most 2: each block of a global batch needs a piece, and the lengths give only 2 (one per sequence, or per chunk of a split sequence); lower world_size");
    let err = refusal(vec![3, 4, 5], |o| {
        o.world_size = 2;
        o.blocks_per_batch = 2;
    });
    assert_eq!(err.argument, "world_size * blocks_per_batch");
    assert_eq!(err.value, "4 (2 x 2)");
    assert!(err.expected.starts_with("at most 3:"), "{err}");
    // Splitting makes pieces enough: 25 steps become 3 pieces for 3 ranks.
    let mut options = Options::new(10);
    options.world_size = 3;
    options.oversize = Oversize::Split;
    assert!(Planner::new(vec![25], options).is_ok());
}

#[test]
fn rank_and_batch_out_of_range() {
    let mut options = Options::new(10);
    options.world_size = 2;
    let plan = Planner::new(vec![5, 5, 5, 5], options)
        .unwrap()
        .plan(0)
        .unwrap();
    let err = plan.batch(2, 0).unwrap_err();
    assert_eq!((err.argument.as_str(), err.value.as_str()), ("rank", "2"));
    assert!(err.expected.contains("below world_size (2)"));
    assert!(plan.rank_batches(7).is_err());
    assert_eq!(plan.batch(0, 1).unwrap_err().argument, "batch");
}
