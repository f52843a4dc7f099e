//! The planner and epoch plan C++ holds (`rust::Box<Planner>`, `rust::Box<EpochPlan>`), the
//! functions that make them from C++'s lengths and options, and their calls: each a checked
//! conversion of C++'s signed values, then the core's method.

use crate::ffi::{Resumed, StatCount};
use crate::guard::{guarded, infallible, BridgeError};
use crate::types::ffi::{EpochPosition, GlobalBatch, PlanOptions, PlanStats};
use bload::Error;

pub struct Planner(pub(crate) bload::Planner);
pub struct EpochPlan(pub(crate) bload::EpochPlan);

pub(crate) fn default_plan_options(t_max: i64) -> PlanOptions {
    let mut options = PlanOptions::from(&bload::Options::new(1));
    options.t_max = t_max;
    options
}

pub(crate) fn policy_code(name: &str) -> Result<i64, BridgeError> {
    guarded("policy_code", || Ok(name.parse::<bload::Policy>()?.code()))
}

pub(crate) fn policy_of_code(code: i64) -> Result<String, BridgeError> {
    guarded("policy_of_code", || {
        Ok(bload::Policy::from_code(code)?.name().to_string())
    })
}

pub(crate) fn plan_options_to_json(options: &PlanOptions) -> Result<String, BridgeError> {
    guarded("plan_options_to_json", || {
        Ok(bload::Options::try_from(options)?.to_json())
    })
}

pub(crate) fn plan_options_from_json(text: &str) -> Result<PlanOptions, BridgeError> {
    guarded("plan_options_from_json", || {
        Ok(PlanOptions::from(&bload::Options::from_json(text)?))
    })
}

pub(crate) fn new_planner(
    lengths: &[i64],
    options: &PlanOptions,
) -> Result<Box<Planner>, BridgeError> {
    guarded("new_planner", || planner_from(lengths, options))
}

pub(crate) fn new_planner_from_i32(
    lengths: &[i32],
    options: &PlanOptions,
) -> Result<Box<Planner>, BridgeError> {
    guarded("new_planner_from_i32", || planner_from(lengths, options))
}

/// The core's planner of `lengths`, which it narrows to its 32 bits a sequence in the pass that
/// checks them (`bload::Planner::from_lengths`).
fn planner_from<T: bload::LengthInteger>(
    lengths: &[T],
    options: &PlanOptions,
) -> bload::Result<Box<Planner>> {
    let options = bload::Options::try_from(options)?;
    Ok(Box::new(Planner(bload::Planner::from_lengths(
        lengths, options,
    )?)))
}

impl Planner {
    pub(crate) fn lengths(&self) -> &[u32] {
        self.0.lengths()
    }

    pub(crate) fn lengths_hash(&self) -> u64 {
        self.0.lengths_hash()
    }

    pub(crate) fn plan_epoch(&self, epoch: i64) -> Result<Box<EpochPlan>, BridgeError> {
        guarded("plan_epoch", || {
            let epoch = u64::try_from(epoch)
                .map_err(|_| Error::invalid("epoch", epoch, "an epoch of at least 0"))?;
            Ok(Box::new(EpochPlan(self.0.plan(epoch)?)))
        })
    }

    pub(crate) fn resume_epoch(&self, at: &EpochPosition) -> Result<Resumed, BridgeError> {
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
    pub(crate) fn epoch(&self) -> u64 {
        self.0.epoch()
    }

    pub(crate) fn batches_per_rank(&self) -> usize {
        self.0.batches_per_rank()
    }

    pub(crate) fn carries_state(&self) -> bool {
        self.0.options().policy.carries_state()
    }

    pub(crate) fn batch_table(&self, rank: i64, batch: i64) -> Result<Vec<i64>, BridgeError> {
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

    pub(crate) fn global_batch(&self, batch: i64) -> Result<GlobalBatch, BridgeError> {
        guarded("global_batch", || {
            let batch = usize::try_from(batch)
                .map_err(|_| Error::invalid("batch", batch, "a batch index of at least 0"))?;
            Ok(GlobalBatch::from(self.0.global_batch(batch)?))
        })
    }

    pub(crate) fn stats(&self) -> PlanStats {
        infallible("stats", || PlanStats::from(self.0.stats()))
    }

    pub(crate) fn stat_counts(&self) -> Vec<StatCount> {
        let counts = self.0.stats().counts().into_iter();
        counts
            .map(|(name, value)| StatCount {
                name: name.to_string(),
                value,
            })
            .collect()
    }

    pub(crate) fn plan_hash(&self) -> u64 {
        self.0.hash()
    }

    pub(crate) fn position(&self, batches: i64) -> Result<EpochPosition, BridgeError> {
        guarded("position", || {
            let per_rank = self.0.batches_per_rank();
            let batches = usize::try_from(batches)
                .map_err(|_| Error::invalid("batches", batches, format!("from 0 to {per_rank}")))?;
            Ok(EpochPosition::from(&self.0.position(batches)?))
        })
    }
}

pub(crate) fn stable_hash(words: &[u64]) -> u64 {
    bload::stable_hash(words)
}

impl Default for PlanStats {
    fn default() -> Self {
        PlanStats::from(&bload::PlanStats::default())
    }
}
