//! The one bridge between bload's Rust core and C++ (libbload.so). C++ owns tensors, archives
//! and torch's data API; Rust owns planning, the lengths format and the block table's meaning.
//! Nothing but plain values and slices crosses: the operators hand their tensors' memory in as
//! slices, and the core checks the table and writes the per-step tables into them.
//!
//! Every fallible function returns `Result`, which cxx turns into a C++ `rust::Error` exception
//! that the plugin rethrows as `c10::Error` (a `RuntimeError` in Python). Every function body runs
//! under `catch_unwind`: a panic, which would abort the process if it reached C++, becomes an
//! error instead. Values from C++ arrive as torch's signed 64-bit ints and are checked here.

mod cost;
mod guard;
mod lengths;
mod mixture;
mod planner;
mod shared;
mod state;
mod store;
mod tables;
pub mod types;

use cost::{cost_code, cost_of_code};
use lengths::{detect_lengths_format, lengths_formats, read_lengths_file};
use mixture::{new_mixture_planner, new_planner_from_sources_json};
use planner::{
    default_plan_options, new_planner, new_planner_from_i32, plan_options_from_json,
    plan_options_to_json, policy_code, policy_of_code, stable_hash,
};
pub use planner::{EpochPlan, Planner};
use shared::planner_from_shared_plan;
use state::{optional_state_fields, ReadState};
use store::{item_pool_bounds, open_sequence_store, read_ahead_bounds, store_read_ranges};
use tables::{
    batch_fields, check_block_table, max_seqlen, policy_names, table_column_names,
    write_attention_mask, write_batch_tables, write_carry_mask, write_cu_seqlens, write_end_mask,
    write_kv_blocks, write_position_ids, write_reset_mask, write_segment_ids, write_valid_mask,
};
use types::ffi::{EpochPosition, PlanOptions};
use types::option_bounds;

#[cxx::bridge(namespace = "bload::ffi")]
mod ffi {
    #[namespace = "bload"]
    extern "C++" {
        include!("bload-cxx/src/types.rs.h");
        type PlanOptions = crate::types::ffi::PlanOptions;
        type PlanStats = crate::types::ffi::PlanStats;
        type EpochPosition = crate::types::ffi::EpochPosition;
        type GlobalBatch = crate::types::ffi::GlobalBatch;
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

    /// A field of the packed batch, as the core declares it (`bload::BatchField`).
    struct BatchFieldInfo {
        name: String,
        /// "loaded" (the dataset's dtype), "bool", "int32" or "int64".
        dtype: String,
        /// The shape rule, e.g. "[blocks, t_max]".
        shape: String,
        /// Written from the block table (by `write_batch_tables`), else read or planned.
        from_table: bool,
        doc: String,
        /// The shape rule as numbers: one entry per dimension (`FieldShape::dim_rules`).
        dims: Vec<DimRule>,
    }

    /// One dimension of a field: `blocks * blocks + t_max * t_max + pieces * pieces + constant`
    /// in the batch's sizes (the core's `bload::DimRule`).
    struct DimRule {
        blocks: i64,
        t_max: i64,
        pieces: i64,
        constant: i64,
    }

    /// A lengths format: its name, and whether the core reads it (the core's `LengthsFormat`).
    struct LengthsFormatInfo {
        name: String,
        read_by_core: bool,
    }

    /// A caller's buffer for one field of `write_batch_tables`: a tensor's memory, its address
    /// and its size in bytes.
    struct TableBuffer {
        address: usize,
        bytes: usize,
    }

    /// What one source of a mixture gives an epoch (the core's `bload::SourceStats`).
    struct SourceStat {
        name: String,
        weight_share: f64,
        source_sequences: u64,
        sequences: u64,
        steps: u64,
        share: f64,
        repeats: u64,
        left_out: u64,
    }

    /// The values an option may take, from `low` to `high`.
    struct OptionBound {
        name: String,
        low: i64,
        high: i64,
    }

    /// The kind of a saved state's field.
    enum StateKind {
        Int,
        Bool,
        Text,
    }

    /// A field of a sampler's saved state (the core's `bload::StateValue`, by name): `int_value`
    /// holds an int or a bool (0 or 1), `text` a string.
    struct StateField {
        name: String,
        kind: StateKind,
        int_value: i64,
        text: String,
    }

    /// One field of a checked sequence store (the core's `bload::StoreField`).
    struct StoreFieldInfo {
        name: String,
        dtype: String,
        shape: Vec<i64>,
        path: String,
        step_bytes: i64,
        bytes: i64,
    }

    /// A checked sequence store (`bload::StoreLayout`), and its layout as JSON for Python.
    struct StoreInfo {
        count: i64,
        steps: i64,
        fields: Vec<StoreFieldInfo>,
        offsets: Vec<i64>,
        layout_json: String,
    }

    extern "Rust" {
        type Planner;
        type EpochPlan;
        type ReadState;

        /// The packed batch's fields, in order (C++ checks its PackedBatch against them).
        fn batch_fields() -> Vec<BatchFieldInfo>;
        /// The policies' names, in the core's order.
        fn policy_names() -> Vec<String>;
        /// The bounds of the options C++ and Python pass as int64, as the checks quote them.
        fn option_bounds() -> Vec<OptionBound>;
        /// Every table of a batch written from its block table, one buffer per field of
        /// `BatchField::FROM_TABLE` in that order (the fields `batch_fields()` says are
        /// `from_table`, allocated as its dtypes and dims say), from one check of the table;
        /// row j is lane `first_lane + j`.
        ///
        /// # Safety
        /// Each buffer is writable memory of its `bytes`, aligned for its field's dtype, and no
        /// two overlap.
        unsafe fn write_batch_tables(
            table: &[i64],
            blocks: i64,
            t_max: i64,
            carry: bool,
            first_lane: i64,
            positions: &str,
            out: &[TableBuffer],
        ) -> Result<()>;
        /// The longest piece of a batch's table (checked as a batch `[blocks, t_max]`'s).
        fn max_seqlen(table: &[i64], blocks: i64, t_max: i64) -> Result<i64>;
        /// flex_attention's kv-block tables of the batch's document mask (causal: also k <= q)
        /// for tiles of `block_size` steps, `[blocks, tiles]` and `[blocks, tiles, tiles]`.
        #[allow(clippy::too_many_arguments)]
        fn write_kv_blocks(
            table: &[i64],
            blocks: i64,
            t_max: i64,
            block_size: i64,
            causal: bool,
            kv_num_blocks: &mut [i32],
            kv_indices: &mut [i32],
            full_kv_num_blocks: &mut [i32],
            full_kv_indices: &mut [i32],
        ) -> Result<()>;
        /// The batch's document mask, bool `[blocks, t_max, t_max]` (causal: also k <= q).
        fn write_attention_mask(
            table: &[i64],
            blocks: i64,
            t_max: i64,
            causal: bool,
            out: &mut [bool],
        ) -> Result<()>;

        /// The state a sampler saves (plan/state.rs): at `position` when `started`.
        fn sampler_state(
            self: &Planner,
            started: bool,
            position: &EpochPosition,
            next_epoch: i64,
        ) -> Result<Vec<StateField>>;
        /// A saved state checked and its epoch resumed; fields named `{prefix}{name}{suffix}`.
        /// With a `shared_dir` (not ""), the epoch is shared on the node: the rank that
        /// `writes` resumes it into a file there, every rank maps it (`Planner::resume_on_node`).
        fn read_sampler_state(
            self: &Planner,
            fields: &[StateField],
            prefix: &str,
            suffix: &str,
            shared_dir: &str,
            writes: bool,
            timeout_s: f64,
        ) -> Result<Box<ReadState>>;
        fn started(self: &ReadState) -> bool;
        fn next_epoch(self: &ReadState) -> i64;
        fn batches(self: &ReadState) -> i64;
        fn take_plan(self: &mut ReadState) -> Result<Box<EpochPlan>>;
        /// Fields a state holds only sometimes (the core's `OPTIONAL_STATE_FIELDS`).
        fn optional_state_fields() -> Vec<String>;

        fn default_plan_options(t_max: i64) -> PlanOptions;
        /// A policy as one int64 (the core's `Policy::code`), and back: PlanOptions holds it so.
        fn policy_code(name: &str) -> Result<i64>;
        fn policy_of_code(code: i64) -> Result<String>;
        /// A cost as one int64 for the DDP agreement (the core's `Cost::code`), and back.
        fn cost_code(name: &str) -> Result<i64>;
        fn cost_of_code(code: i64) -> Result<String>;
        /// A lengths file as `format` ("text", "npy", "idx"), or as detected when "".
        fn read_lengths_file(path: &str, format: &str) -> Result<Vec<i64>>;
        /// The format of a lengths file, by its first bytes, then its extension, else "text".
        fn detect_lengths_format(path: &str) -> Result<String>;
        /// The lengths formats, in the core's order.
        fn lengths_formats() -> Vec<LengthsFormatInfo>;
        /// The sequence store at `path`, its header, offsets and file sizes checked.
        fn open_sequence_store(path: &str) -> Result<StoreInfo>;
        /// The page-aligned byte ranges of a field file that a block table's pieces read, as
        /// flat (start, length) pairs in the table's order (read-ahead advice).
        fn store_read_ranges(
            offsets: &[i64],
            step_bytes: i64,
            file_bytes: i64,
            table: &[i64],
            page: i64,
        ) -> Result<Vec<i64>>;
        /// The read_ahead option's default and its most.
        fn read_ahead_bounds() -> Vec<i64>;
        /// An item pool's default items a worker and its most workers.
        fn item_pool_bounds() -> Vec<i64>;
        /// The core's JSON of the options, to store them (pickles).
        fn plan_options_to_json(options: &PlanOptions) -> Result<String>;
        fn plan_options_from_json(text: &str) -> Result<PlanOptions>;

        fn new_planner(lengths: &[i64], options: &PlanOptions) -> Result<Box<Planner>>;
        /// The same from 32-bit lengths, read without widening.
        fn new_planner_from_i32(lengths: &[i32], options: &PlanOptions) -> Result<Box<Planner>>;
        /// A mixture of sources: source `s` is the next `sizes[s]` of `lengths`.
        fn new_mixture_planner(
            lengths: &[i64],
            sizes: &[i64],
            weights: &[f64],
            names: Vec<String>,
            options: &PlanOptions,
        ) -> Result<Box<Planner>>;
        /// A mixture stored as its concatenated lengths and the core's JSON of its sources.
        fn new_planner_from_sources_json(
            lengths: &[i64],
            sources: &str,
            options: &PlanOptions,
        ) -> Result<Box<Planner>>;
        /// The core's JSON of the sources ("" for one lengths set), to store a planner.
        fn sources_json(self: &Planner) -> String;
        /// The mixture as states show it ("none" for one lengths set), and its fingerprint (0).
        fn mixture_text(self: &Planner) -> String;
        fn mixture_hash(self: &Planner) -> u64;
        fn source_names(self: &Planner) -> Vec<String>;
        /// Where each source starts among the sequences, and one more at the end.
        fn source_starts(self: &Planner) -> Vec<i64>;
        fn source_stats(self: &Planner, epoch: i64) -> Result<Vec<SourceStat>>;
        fn lengths(self: &Planner) -> &[u32];
        fn lengths_hash(self: &Planner) -> u64;
        fn plan_epoch(self: &Planner, epoch: i64) -> Result<Box<EpochPlan>>;
        /// The rest of an epoch from a saved position, for this planner's world size.
        fn resume_epoch(self: &Planner, at: &EpochPosition) -> Result<Resumed>;
        /// A planner of the lengths in the shared plan file of `epoch` under `options` in `dir`.
        fn planner_from_shared_plan(
            options: &PlanOptions,
            epoch: i64,
            dir: &str,
            timeout_s: f64,
        ) -> Result<Box<Planner>>;
        /// Plans `epoch` into a shared plan file in `dir` for a node's ranks; its path.
        fn write_shared_plan(self: &Planner, epoch: i64, dir: &str) -> Result<String>;
        /// The plan of `epoch` mapped from the shared plan file in `dir` (waiting up to
        /// `timeout_s` for it), checked against this planner.
        fn map_shared_plan(
            self: &Planner,
            epoch: i64,
            dir: &str,
            timeout_s: f64,
        ) -> Result<Box<EpochPlan>>;
        /// This planner with its lengths read from `plan`'s shared plan file in place of its
        /// own (`Planner::with_lengths_of`).
        fn with_lengths_of(self: &Planner, plan: &EpochPlan) -> Result<Box<Planner>>;
        /// Bytes the planner holds of its own (`bload::PrivateMemory`).
        fn planner_private_bytes(self: &Planner) -> u64;
        /// Bytes the plan holds of its own: none for a mapped plan's columns.
        fn plan_private_bytes(self: &EpochPlan) -> u64;
        /// Whether the plan is mapped from a shared plan file.
        fn is_shared(self: &EpochPlan) -> bool;

        fn epoch(self: &EpochPlan) -> u64;
        fn batches_per_rank(self: &EpochPlan) -> usize;
        /// Whether each row carries its recurrent state from batch to batch (lanes).
        fn carries_state(self: &EpochPlan) -> bool;
        /// The block table of a batch, row-major (`bload::Column` order).
        fn batch_table(self: &EpochPlan, rank: i64, batch: i64) -> Result<Vec<i64>>;
        /// Every rank's batch `batch` together: its real steps and pieces.
        fn global_batch(self: &EpochPlan, batch: i64) -> Result<GlobalBatch>;
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

#[cfg(test)]
mod tests;
