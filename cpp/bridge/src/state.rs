//! The bridge's half of a sampler's saved state (the core's `plan/state.rs`, the one checkpoint
//! format): the fields a sampler saves, and a saved state read, checked and resumed. C++ writes
//! the fields into its archives and `torch.classes` dicts as they are.

use super::ffi::{StateField, StateKind};
use super::guard::{guarded, BridgeError};
use super::{EpochPlan, Planner};
use bload::{SamplerPlace, StateValue};

impl Planner {
    /// The state a sampler saves: at `position` of its epoch when `started`, and the epoch after.
    pub(crate) fn sampler_state(
        &self,
        started: bool,
        position: &super::EpochPosition,
        next_epoch: i64,
    ) -> Result<Vec<StateField>, BridgeError> {
        guarded("sampler_state", || {
            let position = if started {
                Some(position.try_into()?)
            } else {
                None
            };
            let next_epoch = u64::try_from(next_epoch).map_err(|_| {
                bload::Error::invalid("next_epoch", next_epoch, "an epoch of at least 0")
            })?;
            let place = SamplerPlace {
                position,
                next_epoch,
            };
            Ok(self
                .0
                .sampler_state(&place)
                .into_iter()
                .map(field_of)
                .collect())
        })
    }

    /// A saved state read and checked, its epoch resumed; each field named `{prefix}{name}{suffix}`.
    pub(crate) fn read_sampler_state(
        &self,
        fields: &[StateField],
        prefix: &str,
        suffix: &str,
        shared_dir: &str,
        writes: bool,
        timeout_s: f64,
    ) -> Result<Box<ReadState>, BridgeError> {
        guarded("read_sampler_state", || {
            let fields: Vec<_> = fields.iter().map(value_of).collect();
            let named = |name: &str| format!("{prefix}{name}{suffix}");
            let read = if shared_dir.is_empty() {
                self.0.resume_sampler_state(&fields, &named)?
            } else {
                let timeout = super::shared::timeout_of(timeout_s)?;
                let dir = std::path::Path::new(shared_dir);
                self.0
                    .resume_sampler_state_on_node(&fields, &named, dir, writes, timeout)?
            };
            Ok(Box::new(ReadState {
                next_epoch: read.next_epoch as i64,
                batches: read.resumed.as_ref().map_or(0, |r| r.batches as i64),
                plan: read.resumed.map(|r| r.plan),
            }))
        })
    }
}

pub(crate) fn optional_state_fields() -> Vec<String> {
    bload::OPTIONAL_STATE_FIELDS
        .iter()
        .map(|name| name.to_string())
        .collect()
}

/// A read state: the epoch to go on with (none before the first epoch) and the epoch after.
pub struct ReadState {
    plan: Option<bload::EpochPlan>,
    batches: i64,
    next_epoch: i64,
}

impl ReadState {
    pub(crate) fn started(&self) -> bool {
        self.plan.is_some()
    }
    pub(crate) fn next_epoch(&self) -> i64 {
        self.next_epoch
    }
    pub(crate) fn batches(&self) -> i64 {
        self.batches
    }
    /// The resumed plan, handed over once.
    pub(crate) fn take_plan(&mut self) -> Result<Box<EpochPlan>, BridgeError> {
        guarded("take_plan", || {
            self.plan
                .take()
                .map(|plan| Box::new(EpochPlan(plan)))
                .ok_or_else(|| {
                    bload::Error::invalid("plan", "none", "a state saved after an epoch started")
                })
        })
    }
}

fn field_of((name, value): (&'static str, StateValue)) -> StateField {
    let (kind, int_value, text) = match value {
        StateValue::Int(value) => (StateKind::Int, value, String::new()),
        StateValue::Bool(value) => (StateKind::Bool, i64::from(value), String::new()),
        StateValue::Text(text) => (StateKind::Text, 0, text),
    };
    StateField {
        name: name.into(),
        kind,
        int_value,
        text,
    }
}

fn value_of(field: &StateField) -> (String, StateValue) {
    let value = match field.kind {
        StateKind::Bool => StateValue::Bool(field.int_value != 0),
        StateKind::Text => StateValue::Text(field.text.clone()),
        _ => StateValue::Int(field.int_value),
    };
    (field.name.clone(), value)
}
