//! A sampler's saved state: the one checkpoint format of C++'s archives, Python's state dicts and
//! pickled samplers.
//!
//! A job trusts a checkpoint to resume training where it stopped, so a state must never resume
//! anywhere else. It carries, besides where the sampler stood, what its plans depend on (the
//! lengths' count and fingerprint and every option) and a checksum of all of it. Reading one
//! checks the version first (it says what the other fields mean), then the checksum (a damaged
//! state), then that it was saved for these lengths and options (naming every field that differs,
//! with both values), and only then where it stood. The fields are plain ints, bools and text, so
//! every language stores them as they are (a torch archive's entries, a dict of Python ints).
//!
//! Version 2 is the format C++ archives have had since they gained a checksum; the checksum's
//! words are laid out as they were then, so those archives still load.

use super::{EpochPosition, Planner, Resumed};
use crate::error::{Error, Result};
use crate::options::{Cost, Oversize};
use std::fmt;

/// The version of the state's format; changes whenever the meaning of a field does.
pub const STATE_VERSION: i64 = 2;

/// The last epoch a sampler starts (the one after it must fit an int64 too).
pub const MAX_EPOCH: i64 = i64::MAX - 1;

/// A value of a state's field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateValue {
    Int(i64),
    Bool(bool),
    Text(String),
}

/// Where a sampler stands: the position in the epoch being served (none before the first
/// epoch), and the epoch it starts after that one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SamplerPlace {
    pub position: Option<EpochPosition>,
    pub next_epoch: u64,
}

/// A read state: the epoch to go on with (none before the first) and the next epoch.
#[derive(Debug, Clone)]
pub struct ResumedState {
    pub resumed: Option<Resumed>,
    pub next_epoch: u64,
}

/// The fields that say what a plan depends on, between the version and the place. `cost` is
/// saved only when it is not `steps`, `mixture` only for a mixture of sources and `max_pieces`
/// only under a cap, so states saved before they existed (and every `steps` state of one
/// lengths set without a cap since) read as `steps`, `none` and `none` and keep their checksum.
const IDENTITY: [&str; 11] = [
    "sequences",
    "lengths_hash",
    "t_max",
    "blocks_per_batch",
    "world_size",
    "seed",
    "policy",
    "split_oversized",
    "cost",
    "mixture",
    "max_pieces",
];

/// The fields a state holds only sometimes, in their order after `split_oversized`, with the
/// value a state without one was saved with.
const OPTIONAL: [(&str, &str); 3] = [
    ("cost", "steps"),
    ("mixture", "none"),
    ("max_pieces", "none"),
];

/// Fields a state holds only sometimes (`cost`, when not `steps`; `mixture`, for a mixture of
/// sources; `max_pieces`, under a cap): a reader that looks entries up by name (C++ archives)
/// reads these where present, whatever its own sampler saves.
pub const OPTIONAL_STATE_FIELDS: [&str; 3] = [OPTIONAL[0].0, OPTIONAL[1].0, OPTIONAL[2].0];

/// The saver's own: the core's resume decides which may differ (see [`Planner::resume`]).
const THE_SAVERS: [&str; 2] = ["blocks_per_batch", "world_size"];

impl Planner {
    /// The state a sampler of this planner saves at `place`: its fields in order, the last one
    /// the checksum of all the others.
    pub fn sampler_state(&self, place: &SamplerPlace) -> Vec<(&'static str, StateValue)> {
        let options = &self.options;
        let at = place.position.unwrap_or(EpochPosition {
            epoch: 0,
            planned_world_size: options.world_size,
            first_block: 0,
            world_size: options.world_size,
            blocks_per_batch: options.blocks_per_batch,
            batches: 0,
        });
        let int = |value: u64| StateValue::Int(value as i64);
        let mut fields = vec![
            ("version", StateValue::Int(STATE_VERSION)),
            ("sequences", int(self.lengths.len() as u64)),
            ("lengths_hash", int(self.lengths_hash())),
            ("t_max", int(options.t_max.into())),
            ("blocks_per_batch", int(at.blocks_per_batch.into())),
            ("world_size", int(at.world_size.into())),
            ("seed", int(options.seed)),
            ("policy", StateValue::Text(options.policy.name().into())),
            (
                "split_oversized",
                StateValue::Bool(options.oversize == Oversize::Split),
            ),
            (
                "epoch",
                place
                    .position
                    .map_or(StateValue::Int(-1), |_| int(at.epoch)),
            ),
            ("position", int(at.batches)),
            ("next_epoch", int(place.next_epoch)),
            ("planned_world_size", int(at.planned_world_size.into())),
            ("first_block", int(at.first_block)),
        ];
        let optional = [
            (options.cost != Cost::Steps).then(|| options.cost.to_string()),
            self.is_mixture().then(|| self.mixture_text()),
            options.max_pieces.map(|cap| cap.to_string()),
        ];
        let at = after_options(&fields);
        let saved = OPTIONAL
            .iter()
            .zip(optional)
            .filter_map(|((name, _), value)| value.map(|value| (*name, StateValue::Text(value))));
        let saved: Vec<_> = saved.collect();
        fields.splice(at..at, saved);
        let checksum = checksum_of(fields.iter().map(|(_, value)| value));
        fields.push(("checksum", StateValue::Int(checksum as i64)));
        fields
    }

    /// Reads a state [`Planner::sampler_state`] wrote, checked as the module says, and resumes
    /// its epoch. `fields` may come in any order; every error names the field (`where_` prefixes
    /// it: `state['seed']` in Python, the archive's entry in C++).
    pub fn resume_sampler_state(
        &self,
        fields: &[(String, StateValue)],
        where_: &dyn Fn(&str) -> String,
    ) -> Result<ResumedState> {
        self.resume_sampler_state_by(fields, where_, &|at| self.resume(at))
    }

    /// [`Planner::resume_sampler_state`] with the epoch shared on the node
    /// ([`Planner::resume_on_node`]): the rank that `writes` resumes it into a file in `dir`,
    /// and every local rank maps it (waiting up to `timeout`).
    pub fn resume_sampler_state_on_node(
        &self,
        fields: &[(String, StateValue)],
        where_: &dyn Fn(&str) -> String,
        dir: &std::path::Path,
        writes: bool,
        timeout: std::time::Duration,
    ) -> Result<ResumedState> {
        let resume = |at: &EpochPosition| self.resume_on_node(at, dir, writes, timeout);
        self.resume_sampler_state_by(fields, where_, &resume)
    }

    /// A saved state read and checked, its epoch resumed by `resume`.
    fn resume_sampler_state_by(
        &self,
        fields: &[(String, StateValue)],
        where_: &dyn Fn(&str) -> String,
        resume: &dyn Fn(&EpochPosition) -> Result<Resumed>,
    ) -> Result<ResumedState> {
        let mut expected = self.sampler_state(&SamplerPlace {
            position: None,
            next_epoch: 0,
        });
        // A field this sampler does not save (a `steps` cost, no mixture) may still be given: it
        // goes where others save it, with the value its absence means.
        let first_optional = after_options(&expected);
        for (k, (name, default)) in OPTIONAL.iter().enumerate() {
            if !expected.iter().any(|(field, _)| field == name) {
                let value = StateValue::Text(default.to_string());
                expected.insert(first_optional + k, (name, value));
            }
        }
        let defaults: Vec<StateValue> = OPTIONAL
            .iter()
            .map(|(_, default)| StateValue::Text(default.to_string()))
            .collect();
        // The optional fields the state does not hold: those are not part of its checksum.
        let mut absent: Vec<&str> = Vec::new();
        let mine: Vec<(&str, &StateValue)> = expected
            .iter()
            .map(|(name, value)| (*name, value))
            .collect();
        if let Some((name, _)) = fields
            .iter()
            .find(|(name, _)| !expected.iter().any(|(known, _)| known == name))
        {
            let names: Vec<_> = expected.iter().map(|(name, _)| *name).collect();
            return Err(Error::invalid(
                where_(name),
                "present",
                format!("only the fields a sampler saves: {}", names.join(", ")),
            ));
        }
        // A field given twice would be read as its first copy: refused rather than guessed at.
        if let Some((name, _)) = fields
            .iter()
            .enumerate()
            .find(|(at, (name, _))| fields[..*at].iter().any(|(field, _)| field == name))
            .map(|(_, field)| field)
        {
            return Err(Error::invalid(
                where_(name),
                "given twice",
                "each field of a sampler's state once",
            ));
        }
        let mut saved = Vec::with_capacity(expected.len());
        for (name, mine) in &expected {
            let found = fields.iter().find(|(field, _)| field == name);
            let optional = OPTIONAL.iter().position(|(field, _)| field == name);
            if let (None, Some(k)) = (found, optional) {
                absent.push(name);
                saved.push((*name, &defaults[k]));
                continue;
            }
            let value = found.map(|(_, value)| value).ok_or_else(|| {
                Error::invalid(
                    where_(name),
                    "missing",
                    "every field a sampler's state_dict() or save() writes",
                )
            })?;
            if std::mem::discriminant(value) != std::mem::discriminant(mine) {
                let expected = format!("{} (a corrupted state)", mine.kind());
                return Err(Error::invalid(where_(name), value.kind(), expected));
            }
            // The version first: it says whether the other fields mean what this code reads.
            if *name == "version" && value != mine {
                let expected = format!("{STATE_VERSION}, this bload's format");
                return Err(Error::invalid(where_(name), value, expected));
            }
            saved.push((*name, value));
        }
        let (values, checksum) = saved.split_at(saved.len() - 1);
        let computed = checksum_of(
            values
                .iter()
                .filter(|(name, _)| !absent.contains(name))
                .map(|(_, value)| *value),
        ) as i64;
        if *checksum[0].1 != StateValue::Int(computed) {
            let expected = format!(
                "{computed}, the checksum of the values the state holds: the state is corrupted"
            );
            return Err(Error::invalid(where_("checksum"), checksum[0].1, expected));
        }
        let differ: Vec<(&str, &StateValue, &StateValue)> = IDENTITY
            .iter()
            .filter(|name| !THE_SAVERS.contains(name))
            .map(|name| (*name, value_of(&saved, name), value_of(&mine, name)))
            .filter(|(_, theirs, mine)| theirs != mine)
            .collect();
        if let Some(&(name, theirs, mine)) = differ.first() {
            let others: String = differ[1..]
                .iter()
                .map(|(name, theirs, mine)| {
                    format!(
                        ", and {} = {theirs}: expected {mine} as this sampler has",
                        where_(name)
                    )
                })
                .collect();
            let expected = format!(
                "{mine} as this sampler has{others}; the state was saved with other lengths or \
                 options"
            );
            return Err(Error::invalid(where_(name), theirs, expected));
        }
        // Kinds are checked above: every field read here is an int.
        let int = |name: &str| match value_of(&saved, name) {
            StateValue::Int(value) => *value,
            _ => 0,
        };
        let bounded = |name: &str, low: i64, high: i64| {
            let value = int(name);
            if value < low || value > high {
                Err(Error::invalid(
                    where_(name),
                    value,
                    format!("from {low} to {high}"),
                ))
            } else {
                Ok(value)
            }
        };
        let epoch = bounded("epoch", -1, MAX_EPOCH)?;
        let next_epoch = bounded("next_epoch", 0, MAX_EPOCH + 1)? as u64;
        if epoch < 0 {
            return Ok(ResumedState {
                resumed: None,
                next_epoch,
            });
        }
        let u32_field = |name: &str| bounded(name, 1, i64::from(u32::MAX)).map(|v| v as u32);
        let at = EpochPosition {
            epoch: epoch as u64,
            planned_world_size: u32_field("planned_world_size")?,
            first_block: bounded("first_block", 0, i64::MAX)? as u64,
            world_size: u32_field("world_size")?,
            blocks_per_batch: u32_field("blocks_per_batch")?,
            batches: bounded("position", 0, i64::MAX)? as u64,
        };
        // Resume names the position's fields as EpochPosition does; those whose value is the
        // state's are named as the state names them (the batches served are its position).
        // Others (blocks_per_batch, the lane count) hold this sampler's value and keep their name.
        let resumed = resume(&at).map_err(|mut err| {
            let state_name = match err.argument.as_str() {
                "batches" => Some("position"),
                "first_block" => Some("first_block"),
                "planned_world_size" => Some("planned_world_size"),
                _ => None,
            };
            if let Some(name) = state_name {
                err.argument = where_(name);
            }
            err
        })?;
        Ok(ResumedState {
            resumed: Some(resumed),
            next_epoch,
        })
    }
}

/// Where the optional fields go: after `split_oversized`, the last option always saved.
fn after_options<T>(fields: &[(&str, T)]) -> usize {
    let after = fields
        .iter()
        .position(|(name, _)| *name == "split_oversized");
    after.map_or(fields.len(), |at| at + 1)
}

/// The field `name` of a list that holds every field of the format.
fn value_of<'a>(fields: &[(&str, &'a StateValue)], name: &str) -> &'a StateValue {
    const NONE: &StateValue = &StateValue::Int(0);
    fields
        .iter()
        .find(|(field, _)| *field == name)
        .map_or(NONE, |(_, value)| *value)
}

impl StateValue {
    fn kind(&self) -> &'static str {
        match self {
            StateValue::Int(_) => "an int",
            StateValue::Bool(_) => "a bool",
            StateValue::Text(_) => "a string",
        }
    }
}

impl fmt::Display for StateValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateValue::Int(value) => write!(f, "{value}"),
            StateValue::Bool(value) => write!(f, "{value}"),
            StateValue::Text(text) => write!(f, "{text:?}"),
        }
    }
}

/// The values' stable hash: each value as its kind and its contents in 64-bit words (a string as
/// its size and its bytes, eight to a word, little-endian), so no two field lists share words.
fn checksum_of<'a>(values: impl Iterator<Item = &'a StateValue>) -> u64 {
    let mut words = Vec::new();
    for value in values {
        match value {
            StateValue::Int(value) => words.extend([0, *value as u64]),
            StateValue::Bool(value) => words.extend([1, u64::from(*value)]),
            StateValue::Text(text) => {
                words.extend([2, text.len() as u64]);
                words.extend(text.as_bytes().chunks(8).map(|chunk| {
                    let mut word = [0u8; 8];
                    word[..chunk.len()].copy_from_slice(chunk);
                    u64::from_le_bytes(word)
                }));
            }
        }
    }
    super::stable_hash(&words)
}
