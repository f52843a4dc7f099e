//! The one bridge between bload's Rust planner and C++ (libbload.so). C++ owns tensors, archives
//! and torch's data API; Rust owns planning. Nothing but plain values and slices crosses.
//!
//! Every fallible function returns `Result`, which cxx turns into a C++ `rust::Error` exception
//! that the plugin rethrows as `c10::Error` (a `RuntimeError` in Python). Every function body runs
//! under `catch_unwind`: a panic, which would abort the process if it reached C++, becomes an
//! error instead. Values from C++ arrive as torch's signed 64-bit ints and are checked here.

use bload::{Error, Options, Oversize, Policy};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

#[cxx::bridge(namespace = "bload::ffi")]
mod ffi {
    /// Plan options as C++ holds them; see `bload::Options` in the core.
    struct PlanOptions {
        t_max: i64,
        blocks_per_batch: i64,
        world_size: i64,
        seed: i64,
        /// `best_fit`, `random_fill` or `pad_to_max`.
        policy: String,
        /// Cut sequences longer than `t_max` into chunks instead of rejecting them.
        split_oversized: bool,
    }

    /// One piece of a block table (see `bload::Piece` in the core), with the block it lies in
    /// counted from the first block of its batch.
    struct PieceRow {
        block: i64,
        block_offset: i64,
        length: i64,
        sequence: i64,
        offset: i64,
        sequence_length: i64,
    }

    /// `bload::PlanStats`, as counts.
    struct PlanSummary {
        sequences: u64,
        steps: u64,
        pieces: u64,
        blocks: u64,
        padding: u64,
        deleted: u64,
        split_sequences: u64,
        split_pieces: u64,
        rounding_blocks: u64,
        rounding_padding: u64,
        empty_blocks: u64,
        lower_bound_blocks: u64,
        lower_bound_padding: u64,
    }

    extern "Rust" {
        type Planner;
        type EpochPlan;

        fn read_lengths_file(path: &str) -> Result<Vec<i64>>;
        fn new_planner(lengths: &[i64], options: &PlanOptions) -> Result<Box<Planner>>;
        fn lengths(self: &Planner) -> &[u32];
        fn lengths_hash(self: &Planner) -> u64;
        fn plan_epoch(self: &Planner, epoch: i64) -> Result<Box<EpochPlan>>;

        fn epoch(self: &EpochPlan) -> u64;
        fn batches_per_rank(self: &EpochPlan) -> usize;
        fn batch_pieces(self: &EpochPlan, rank: i64, batch: i64) -> Result<Vec<PieceRow>>;
        fn summary(self: &EpochPlan) -> PlanSummary;
        fn plan_hash(self: &EpochPlan) -> u64;
    }
}

use ffi::{PieceRow, PlanOptions, PlanSummary};

pub struct Planner(bload::Planner);
pub struct EpochPlan(bload::EpochPlan);

/// The message of a rejected call, as C++ will see it in `what()`.
#[derive(Debug)]
pub struct BridgeError(String);

impl fmt::Display for BridgeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BridgeError {}

/// Runs `body`, turning its error, or a panic (a bug in bload), into an error for C++.
fn guarded<T>(call: &str, body: impl FnOnce() -> bload::Result<T>) -> Result<T, BridgeError> {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(BridgeError(error.to_string())),
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".to_string());
            Err(BridgeError(format!(
                "internal error in bload ({call}): {message}; please report it"
            )))
        }
    }
}

/// A signed value from C++ that must fit `u32`.
fn to_u32(argument: &str, value: i64) -> bload::Result<u32> {
    u32::try_from(value)
        .map_err(|_| Error::invalid(argument, value, format!("a value from 0 to {}", u32::MAX)))
}

fn to_u64(argument: &str, value: i64) -> bload::Result<u64> {
    u64::try_from(value).map_err(|_| Error::invalid(argument, value, "a value of at least 0"))
}

fn to_options(options: &PlanOptions) -> bload::Result<Options> {
    let policy: Policy = options.policy.parse()?;
    Ok(Options {
        t_max: to_u32("t_max", options.t_max)?,
        blocks_per_batch: to_u32("blocks_per_batch", options.blocks_per_batch)?,
        world_size: to_u32("world_size", options.world_size)?,
        seed: to_u64("seed", options.seed)?,
        policy,
        oversize: if options.split_oversized {
            Oversize::Split
        } else {
            Oversize::Reject
        },
    })
}

fn read_lengths_file(path: &str) -> Result<Vec<i64>, BridgeError> {
    guarded("read_lengths_file", || {
        let lengths = bload::read_lengths(std::path::Path::new(path))?;
        Ok(lengths.into_iter().map(i64::from).collect())
    })
}

fn new_planner(lengths: &[i64], options: &PlanOptions) -> Result<Box<Planner>, BridgeError> {
    guarded("new_planner", || {
        let options = to_options(options)?;
        let lengths = lengths
            .iter()
            .enumerate()
            .map(|(i, &length)| {
                u32::try_from(length).map_err(|_| {
                    let expected = format!("a length from 1 to {} steps", u32::MAX);
                    Error::invalid(format!("lengths[{i}]"), length, expected)
                })
            })
            .collect::<bload::Result<Vec<u32>>>()?;
        Ok(Box::new(Planner(bload::Planner::new(lengths, options)?)))
    })
}

impl Planner {
    fn lengths(&self) -> &[u32] {
        self.0.lengths()
    }

    fn lengths_hash(&self) -> u64 {
        self.0.lengths_hash()
    }

    fn plan_epoch(&self, epoch: i64) -> Result<Box<EpochPlan>, BridgeError> {
        guarded("plan_epoch", || {
            let epoch = to_u64("epoch", epoch)?;
            Ok(Box::new(EpochPlan(self.0.plan(epoch))))
        })
    }
}

impl EpochPlan {
    fn epoch(&self) -> u64 {
        self.0.epoch()
    }

    fn batches_per_rank(&self) -> usize {
        self.0.batches_per_rank()
    }

    fn batch_pieces(&self, rank: i64, batch: i64) -> Result<Vec<PieceRow>, BridgeError> {
        guarded("batch_pieces", || {
            let rank = to_u32("rank", rank)?;
            let batch = usize::try_from(batch)
                .map_err(|_| Error::invalid("batch", batch, "a batch index of at least 0"))?;
            let batch = self.0.batch(rank, batch)?;
            let rows = batch.table().into_iter().map(|row| PieceRow {
                block: row[0],
                block_offset: row[1],
                length: row[2],
                sequence: row[3],
                offset: row[4],
                sequence_length: row[5],
            });
            Ok(rows.collect())
        })
    }

    fn summary(&self) -> PlanSummary {
        let stats = self.0.stats();
        PlanSummary {
            sequences: stats.sequences,
            steps: stats.steps,
            pieces: stats.pieces,
            blocks: stats.blocks,
            padding: stats.padding,
            deleted: stats.deleted,
            split_sequences: stats.split_sequences,
            split_pieces: stats.split_pieces,
            rounding_blocks: stats.rounding_blocks,
            rounding_padding: stats.rounding_padding,
            empty_blocks: stats.empty_blocks,
            lower_bound_blocks: stats.lower_bound.blocks,
            lower_bound_padding: stats.lower_bound.padding,
        }
    }

    fn plan_hash(&self) -> u64 {
        self.0.hash()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(t_max: i64) -> PlanOptions {
        PlanOptions {
            t_max,
            blocks_per_batch: 1,
            world_size: 1,
            seed: 0,
            policy: "best_fit".to_string(),
            split_oversized: false,
        }
    }

    #[test]
    fn negative_values_are_named_errors() {
        let error = new_planner(&[3, -2], &options(4)).err().unwrap();
        assert_eq!(
            error.to_string(),
            "lengths[1] = -2: expected a length from 1 to 4294967295 steps"
        );
        let error = new_planner(&[3], &options(-1)).err().unwrap();
        assert!(error.to_string().starts_with("t_max = -1: "), "{error}");
        let planner = new_planner(&[3, 2], &options(4)).unwrap();
        let error = planner.plan_epoch(-1).err().unwrap();
        assert!(error.to_string().starts_with("epoch = -1: "), "{error}");
    }

    #[test]
    fn a_panic_becomes_an_error() {
        let result: Result<(), _> = guarded("test", || panic!("boom"));
        assert_eq!(
            result.unwrap_err().to_string(),
            "internal error in bload (test): boom; please report it"
        );
    }

    #[test]
    fn batch_rows_cover_every_sequence_once() {
        let mut opts = options(10);
        opts.world_size = 2;
        let planner = new_planner(&[7, 3, 5, 5, 9, 1, 4, 6], &opts).unwrap();
        let plan = planner.plan_epoch(0).unwrap();
        let mut seen = Vec::new();
        for rank in 0..2 {
            for batch in 0..plan.batches_per_rank() as i64 {
                for row in plan.batch_pieces(rank, batch).unwrap() {
                    assert_eq!(row.block, 0);
                    seen.push(row.sequence);
                }
            }
        }
        seen.sort();
        assert_eq!(seen, (0..8).collect::<Vec<_>>());
        let error = plan.batch_pieces(2, 0).err().unwrap();
        assert!(error.to_string().starts_with("rank = 2: "), "{error}");
    }
}
