//! The one bridge between bload's Rust core and C++ (libbload.so). C++ owns tensors, archives
//! and torch's data API; Rust owns planning, the lengths format and the block table's meaning.
//! Nothing but plain values and slices crosses: the operators hand their tensors' memory in as
//! slices, and the core checks the table and writes the per-step tables into them.
//!
//! Every fallible function returns `Result`, which cxx turns into a C++ `rust::Error` exception
//! that the plugin rethrows as `c10::Error` (a `RuntimeError` in Python). Every function body runs
//! under `catch_unwind`: a panic, which would abort the process if it reached C++, becomes an
//! error instead. Values from C++ arrive as torch's signed 64-bit ints and are checked here.

pub mod types;

use bload::{BlockTable, Column, Error};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use types::ffi::{EpochPosition, PlanOptions, PlanStats, Policy};

#[cxx::bridge(namespace = "bload::ffi")]
mod ffi {
    #[namespace = "bload"]
    extern "C++" {
        include!("bload-cxx/src/types.rs.h");
        type PlanOptions = crate::types::ffi::PlanOptions;
        type PlanStats = crate::types::ffi::PlanStats;
        type Policy = crate::types::ffi::Policy;
        type EpochPosition = crate::types::ffi::EpochPosition;
    }

    /// An epoch to go on with (the core's `bload::Resumed`): the plan, and the batches of it
    /// each rank has served.
    struct Resumed {
        plan: Box<EpochPlan>,
        batches: i64,
    }

    /// One count of a plan's stats, by name (see `bload::PlanStats::counts`).
    struct StatCount {
        name: String,
        value: u64,
    }

    extern "Rust" {
        type Planner;
        type EpochPlan;

        fn default_plan_options(t_max: i64) -> PlanOptions;
        fn parse_policy(name: &str) -> Result<Policy>;
        fn policy_name(policy: Policy) -> Result<String>;
        fn read_lengths_file(path: &str) -> Result<Vec<i64>>;
        /// The core's JSON of the options, to store them (pickles).
        fn plan_options_to_json(options: &PlanOptions) -> Result<String>;
        fn plan_options_from_json(text: &str) -> Result<PlanOptions>;

        fn new_planner(lengths: &[i64], options: &PlanOptions) -> Result<Box<Planner>>;
        /// The same from 32-bit lengths, read without widening.
        fn new_planner_from_i32(lengths: &[i32], options: &PlanOptions) -> Result<Box<Planner>>;
        fn lengths(self: &Planner) -> &[u32];
        fn lengths_hash(self: &Planner) -> u64;
        fn plan_epoch(self: &Planner, epoch: i64) -> Result<Box<EpochPlan>>;
        /// The rest of an epoch from a saved position, for this planner's world size.
        fn resume_epoch(self: &Planner, at: &EpochPosition) -> Result<Resumed>;

        fn epoch(self: &EpochPlan) -> u64;
        fn batches_per_rank(self: &EpochPlan) -> usize;
        /// Whether each row carries its recurrent state from batch to batch (lanes).
        fn carries_state(self: &EpochPlan) -> bool;
        /// The block table of a batch, row-major (`bload::Column` order).
        fn batch_table(self: &EpochPlan, rank: i64, batch: i64) -> Result<Vec<i64>>;
        fn stats(self: &EpochPlan) -> PlanStats;
        fn stat_counts(self: &EpochPlan) -> Vec<StatCount>;
        fn plan_hash(self: &EpochPlan) -> u64;
        /// Where the ranks stand once each has served `batches` batches of the plan.
        fn position(self: &EpochPlan, batches: i64) -> Result<EpochPosition>;

        /// bload's one stable hash (FNV-1a over little-endian 64-bit words), for the sampler's
        /// archive checksum.
        fn stable_hash(words: &[u64]) -> u64;

        /// The block table's column names, in order.
        fn table_column_names() -> Vec<String>;
        fn check_block_table(table: &[i64], blocks: i64, t_max: i64) -> Result<()>;
        /// `carry`: the rows carry their state from the previous batch (lanes).
        fn write_reset_mask(
            table: &[i64],
            blocks: i64,
            t_max: i64,
            carry: bool,
            out: &mut [bool],
        ) -> Result<()>;
        fn write_end_mask(table: &[i64], blocks: i64, t_max: i64, out: &mut [bool]) -> Result<()>;
        /// `out` is `[blocks]`; the table is read as one whose rows carry their state.
        fn write_carry_mask(table: &[i64], blocks: i64, t_max: i64, out: &mut [bool])
            -> Result<()>;
        fn write_valid_mask(table: &[i64], blocks: i64, t_max: i64, out: &mut [bool])
            -> Result<()>;
        fn write_segment_ids(table: &[i64], blocks: i64, t_max: i64, out: &mut [i32])
            -> Result<()>;
        fn write_position_ids(
            table: &[i64],
            blocks: i64,
            t_max: i64,
            out: &mut [i64],
        ) -> Result<()>;
        fn write_cu_seqlens(table: &[i64], out: &mut [i32]) -> Result<()>;
    }
}

use ffi::{Resumed, StatCount};

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

/// The same, for calls that cannot fail but for a bug: the panic is caught and reported by
/// value, never unwound into C++.
fn infallible<T: Default>(call: &str, body: impl FnOnce() -> T) -> T {
    guarded(call, || Ok(body())).unwrap_or_else(|error| {
        eprintln!("{error}");
        T::default()
    })
}

/// An empty vector with room for `len` elements, or the error that memory for them is lacking
/// (an abort here would take the whole Python or C++ process with it).
fn sized<T>(what: &str, len: usize) -> bload::Result<Vec<T>> {
    let mut vec = Vec::new();
    vec.try_reserve_exact(len)
        .map_err(|_| Error::out_of_memory(what, len, std::mem::size_of::<T>()))?;
    Ok(vec)
}

fn default_plan_options(t_max: i64) -> PlanOptions {
    let mut options = PlanOptions::from(&bload::Options::new(1));
    options.t_max = t_max;
    options
}

fn parse_policy(name: &str) -> Result<Policy, BridgeError> {
    guarded("parse_policy", || Ok(name.parse::<bload::Policy>()?.into()))
}

fn policy_name(policy: Policy) -> Result<String, BridgeError> {
    guarded("policy_name", || {
        Ok(bload::Policy::try_from(policy)?.name().to_string())
    })
}

fn read_lengths_file(path: &str) -> Result<Vec<i64>, BridgeError> {
    guarded("read_lengths_file", || {
        let lengths = bload::read_lengths(std::path::Path::new(path))?;
        let mut wide = sized("the lengths as 64-bit integers", lengths.len())?;
        wide.extend(lengths.into_iter().map(i64::from));
        Ok(wide)
    })
}

fn plan_options_to_json(options: &PlanOptions) -> Result<String, BridgeError> {
    guarded("plan_options_to_json", || {
        Ok(bload::Options::try_from(options)?.to_json())
    })
}

fn plan_options_from_json(text: &str) -> Result<PlanOptions, BridgeError> {
    guarded("plan_options_from_json", || {
        Ok(PlanOptions::from(&bload::Options::from_json(text)?))
    })
}

fn new_planner(lengths: &[i64], options: &PlanOptions) -> Result<Box<Planner>, BridgeError> {
    guarded("new_planner", || planner_from(lengths, options))
}

fn new_planner_from_i32(
    lengths: &[i32],
    options: &PlanOptions,
) -> Result<Box<Planner>, BridgeError> {
    guarded("new_planner_from_i32", || planner_from(lengths, options))
}

/// The core's planner of `lengths` narrowed to its 32 bits a sequence: one pass that checks
/// them all, then one that converts (both simple enough to vectorise: 10M lengths in a few ms).
fn planner_from<T: Copy + Into<i64>>(
    lengths: &[T],
    options: &PlanOptions,
) -> bload::Result<Box<Planner>> {
    let options = bload::Options::try_from(options)?;
    let fits = |length: i64| (0..=i64::from(u32::MAX)).contains(&length);
    if let Some(i) = lengths.iter().position(|&length| !fits(length.into())) {
        let expected = format!("a length from 1 to {} steps", u32::MAX);
        return Err(Error::invalid(
            format!("lengths[{i}]"),
            lengths[i].into(),
            expected,
        ));
    }
    let mut narrow = sized("the lengths as 32-bit integers", lengths.len())?;
    narrow.extend(lengths.iter().map(|&length| length.into() as u32));
    Ok(Box::new(Planner(bload::Planner::new(narrow, options)?)))
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
            let epoch = u64::try_from(epoch)
                .map_err(|_| Error::invalid("epoch", epoch, "an epoch of at least 0"))?;
            Ok(Box::new(EpochPlan(self.0.plan(epoch)?)))
        })
    }

    fn resume_epoch(&self, at: &EpochPosition) -> Result<Resumed, BridgeError> {
        guarded("resume_epoch", || {
            let resumed = self.0.resume(&at.try_into()?)?;
            Ok(Resumed {
                plan: Box::new(EpochPlan(resumed.plan)),
                // At most the plan's batches per rank, a count of 32-bit-indexed blocks.
                batches: resumed.batches as i64,
            })
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

    fn carries_state(&self) -> bool {
        self.0.options().policy.carries_state()
    }

    fn batch_table(&self, rank: i64, batch: i64) -> Result<Vec<i64>, BridgeError> {
        guarded("batch_table", || {
            let ranks = self.0.options().world_size;
            let rank = u32::try_from(rank).map_err(|_| {
                let expected = format!("a rank below world_size ({ranks}), counting from 0");
                Error::invalid("rank", rank, expected)
            })?;
            let batch = usize::try_from(batch)
                .map_err(|_| Error::invalid("batch", batch, "a batch index of at least 0"))?;
            let rows = self.0.batch(rank, batch)?.table();
            Ok(rows.into_iter().flatten().collect())
        })
    }

    fn stats(&self) -> PlanStats {
        infallible("stats", || PlanStats::from(self.0.stats()))
    }

    fn stat_counts(&self) -> Vec<StatCount> {
        let counts = self.0.stats().counts().into_iter();
        counts
            .map(|(name, value)| StatCount {
                name: name.to_string(),
                value,
            })
            .collect()
    }

    fn plan_hash(&self) -> u64 {
        self.0.hash()
    }

    fn position(&self, batches: i64) -> Result<EpochPosition, BridgeError> {
        guarded("position", || {
            let per_rank = self.0.batches_per_rank();
            let batches = usize::try_from(batches)
                .map_err(|_| Error::invalid("batches", batches, format!("from 0 to {per_rank}")))?;
            Ok(EpochPosition::from(&self.0.position(batches)?))
        })
    }
}

fn stable_hash(words: &[u64]) -> u64 {
    bload::stable_hash(words)
}

impl Default for PlanStats {
    fn default() -> Self {
        PlanStats::from(&bload::PlanStats::default())
    }
}

fn table_column_names() -> Vec<String> {
    Column::ALL.map(|c| c.name().to_string()).into()
}

fn check_block_table(table: &[i64], blocks: i64, t_max: i64) -> Result<(), BridgeError> {
    guarded("check_block_table", || {
        BlockTable::new(table, blocks, t_max).map(drop)
    })
}

// The per-step table writers C++ calls: each checks the table as a batch `[blocks, t_max]`'s,
// then writes one table into the caller's buffer.
macro_rules! step_table_writers {
    ($($name:ident: $element:ty => $write:path;)*) => {$(
        fn $name(
            table: &[i64],
            blocks: i64,
            t_max: i64,
            out: &mut [$element],
        ) -> Result<(), BridgeError> {
            guarded(stringify!($name), || {
                $write(&BlockTable::new(table, blocks, t_max)?, out)
            })
        }
    )*};
}

step_table_writers! {
    write_valid_mask: bool => BlockTable::write_valid_mask;
    write_end_mask: bool => BlockTable::write_end_mask;
    write_segment_ids: i32 => BlockTable::write_segment_ids;
    write_position_ids: i64 => BlockTable::write_position_ids;
}

fn write_reset_mask(
    table: &[i64],
    blocks: i64,
    t_max: i64,
    carry: bool,
    out: &mut [bool],
) -> Result<(), BridgeError> {
    guarded("write_reset_mask", || {
        BlockTable::with_carry(table, blocks, t_max, carry)?.write_reset_mask(out)
    })
}

fn write_carry_mask(
    table: &[i64],
    blocks: i64,
    t_max: i64,
    out: &mut [bool],
) -> Result<(), BridgeError> {
    guarded("write_carry_mask", || {
        BlockTable::with_carry(table, blocks, t_max, true)?.write_carry_mask(out)
    })
}

fn write_cu_seqlens(table: &[i64], out: &mut [i32]) -> Result<(), BridgeError> {
    guarded("cu_seqlens", || bload::write_cu_seqlens(table, out))
}

#[cfg(test)]
mod tests;
