//! Plans shared on a node (the core's `plan/shared`, docs/shared_plans.md), for C++ and Python.

use crate::guard::{guarded, BridgeError};
use crate::types::ffi::PlanOptions;
use crate::{EpochPlan, Planner};
use bload::Error;
use std::path::Path;
use std::time::Duration;

fn epoch_of(epoch: i64) -> bload::Result<u64> {
    u64::try_from(epoch).map_err(|_| Error::invalid("epoch", epoch, "an epoch of at least 0"))
}

/// A planner of the lengths in the shared plan file of `epoch` under `options` in `dir`
/// (waiting up to `timeout_s`): for a rank that holds no lengths of its own.
pub(crate) fn planner_from_shared_plan(
    options: &PlanOptions,
    epoch: i64,
    dir: &str,
    timeout_s: f64,
) -> Result<Box<Planner>, BridgeError> {
    guarded("planner_from_shared_plan", || {
        let options = bload::Options::try_from(options)?;
        let timeout = timeout_of(timeout_s)?;
        let (planner, _) =
            bload::Planner::from_shared_plan(options, epoch_of(epoch)?, Path::new(dir), timeout)?;
        Ok(Box::new(Planner(planner)))
    })
}

pub(crate) fn timeout_of(timeout_s: f64) -> bload::Result<Duration> {
    let most = bload::MAX_SHARED_PLAN_TIMEOUT_S;
    if !(0.0..=most).contains(&timeout_s) {
        return Err(Error::invalid(
            "shared_plan_timeout",
            timeout_s,
            format!("a finite number of seconds, from 0 to {most}"),
        ));
    }
    Ok(Duration::from_secs_f64(timeout_s))
}

impl Planner {
    pub(crate) fn write_shared_plan(&self, epoch: i64, dir: &str) -> Result<String, BridgeError> {
        guarded("write_shared_plan", || {
            let path = self.0.write_shared_plan(epoch_of(epoch)?, Path::new(dir))?;
            Ok(path.display().to_string())
        })
    }

    pub(crate) fn map_shared_plan(
        &self,
        epoch: i64,
        dir: &str,
        timeout_s: f64,
    ) -> Result<Box<EpochPlan>, BridgeError> {
        guarded("map_shared_plan", || {
            let timeout = timeout_of(timeout_s)?;
            let plan = self
                .0
                .map_shared_plan(epoch_of(epoch)?, Path::new(dir), timeout)?;
            Ok(Box::new(EpochPlan(plan)))
        })
    }

    pub(crate) fn with_lengths_of(&self, plan: &EpochPlan) -> Result<Box<Planner>, BridgeError> {
        guarded("with_lengths_of", || {
            Ok(Box::new(Planner(self.0.with_lengths_of(&plan.0)?)))
        })
    }

    pub(crate) fn planner_private_bytes(&self) -> u64 {
        self.0.private_memory().bytes
    }
}

impl EpochPlan {
    pub(crate) fn plan_private_bytes(&self) -> u64 {
        self.0.private_memory().bytes
    }

    pub(crate) fn is_shared(&self) -> bool {
        self.0.is_shared()
    }
}
