//! bload packs variable-length sequences into fixed blocks of `t_max` steps for data-parallel
//! training: every rank runs the same number of identically shaped batches, no step of any
//! sequence is deleted, and padding is close to the least possible. Each block carries a table
//! of where each sequence starts, so a recurrent model can reset its state there.
//!
//! ```
//! use bload::{Options, Planner};
//!
//! let mut options = Options::new(10);
//! options.world_size = 2;
//! let planner = Planner::new(vec![7, 3, 5, 5, 9, 1, 4, 6], options)?;
//! let plan = planner.plan(0)?;
//! // 40 steps fill 4 blocks of 10 exactly, 2 batches on each of 2 ranks.
//! assert_eq!(plan.stats().padding, 0);
//! for rank in 0..2 {
//!     assert_eq!(plan.rank_batches(rank)?.len(), 2);
//! }
//! let tables = plan.batch(1, 0)?.tables();
//! assert_eq!(tables.valid.iter().filter(|&&v| v).count(), 10);
//! # Ok::<(), bload::Error>(())
//! ```
//!
//! This crate is the pure planner; it depends on no tensor library, except through the optional
//! `tch` feature (the [`tch`] module: packed batches as `tch` tensors).

mod alloc;
mod cost;
mod error;
mod lengths;
mod options;
mod output;
mod pack;
mod plan;
mod prefetch;
mod read_ahead;
mod rng;
pub mod stats;
mod store;
mod table;
#[cfg(feature = "tch")]
pub mod tch;

pub use error::{Error, Result};
pub use lengths::{
    detect_format, parse_lengths, read_lengths, read_lengths_and_format, read_lengths_as,
    write_npy, LengthsFormat, NpyDtype,
};
pub use options::{
    Cost, Options, Oversize, Policy, MAX_ATTENTION_LINEAR, MAX_PIECES_HELP, MAX_SEED, MAX_T_MAX,
};
pub use output::write_whole;
pub use plan::{
    narrow_lengths, stable_hash, Batch, Block, EpochPlan, EpochPosition, GlobalBatch,
    LengthInteger, Piece, Planner, PrivateMemory, Resumed, ResumedState, SamplerPlace, Source,
    SourceStats, StateValue, MAX_EPOCH, MAX_SHARED_PLAN_TIMEOUT_S, OPTIONAL_STATE_FIELDS,
    SHARED_PLAN_VERSION, STATE_VERSION,
};
pub use read_ahead::{
    store_read_ranges, ITEMS_PER_WORKER, MAX_POOL_WORKERS, MAX_READ_AHEAD, READ_AHEAD,
};
pub use stats::{Imbalance, LowerBound, MethodStats, PlanStats};
pub use store::{
    check_field_size, crc32, open_store, StoreField, StoreLayout, STORE_DTYPES, STORE_FORMAT,
    STORE_VERSION,
};
pub use table::{
    check_batch_shape, padded_segments_bound, same_names, write_cu_seqlens, BatchField,
    BatchTablesMut, BlockTable, Column, DimRule, FieldBuffer, FieldDtype, FieldShape, KvBlocksMut,
    Positions, StepTables, TableRow, BATCH_FIELD_NAMES, MAX_BATCH_STEPS,
};
