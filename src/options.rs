//! What a plan is made from besides the lengths: block size, batch shape, ranks, seed, policy.

pub use crate::cost::{Cost, MAX_ATTENTION_LINEAR};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// How sequences are chosen to share a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// Each block opens with the longest remaining sequence and is then filled exactly (or as
    /// closely as the remaining lengths allow) from the rest. Near the lower bound on padding.
    #[default]
    BestFit,
    /// The BLoad paper's method: fill each block with randomly drawn sequences that still fit,
    /// then pad the rest. Kept as the reference to compare against.
    RandomFill,
    /// Each sequence alone in its block, padded to `t_max`: what padding every sequence to the
    /// longest costs (the paper's "padding" baseline). For comparison, not for training.
    PadToMax,
    /// Recurrent state carried across batches: each row of a rank's batches is a lane that runs
    /// its sequences end to end for the whole epoch, `t_max` steps a batch, so sequences of any
    /// length are served whole and only the ends of lanes are padded (`plan/lanes.rs`). The
    /// `oversize` option does not apply: no sequence is too long.
    Lanes,
}

impl Policy {
    pub const ALL: [Policy; 4] = [
        Policy::BestFit,
        Policy::RandomFill,
        Policy::PadToMax,
        Policy::Lanes,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Policy::BestFit => "best_fit",
            Policy::RandomFill => "random_fill",
            Policy::PadToMax => "pad_to_max",
            Policy::Lanes => "lanes",
        }
    }

    /// Every policy's name, as messages list them: "best_fit, random_fill, pad_to_max or lanes".
    pub fn names() -> String {
        let names: Vec<&str> = Policy::ALL.iter().map(|policy| policy.name()).collect();
        match names.split_last() {
            Some((last, [])) => last.to_string(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        }
    }

    /// The policy as an integer, for C++'s plain-data options (`PlanOptions::policy`) and the
    /// ranks' agreement check: its position in [`Policy::ALL`]. A new policy is appended there,
    /// so a code never changes meaning.
    pub fn code(self) -> i64 {
        Policy::ALL
            .iter()
            .position(|&policy| policy == self)
            .unwrap_or(0) as i64
    }

    /// The policy [`Policy::code`] gave `code`.
    pub fn from_code(code: i64) -> Result<Self> {
        usize::try_from(code)
            .ok()
            .and_then(|index| Policy::ALL.get(index).copied())
            .ok_or_else(|| {
                Error::invalid(
                    "policy",
                    code,
                    format!(
                        "a policy's code, from 0 to {} ({})",
                        Policy::ALL.len() - 1,
                        Policy::names()
                    ),
                )
            })
    }

    /// Whether a model carries its state from one batch to the next (each row is a lane).
    pub fn carries_state(self) -> bool {
        self == Policy::Lanes
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Policy {
    type Err = Error;
    fn from_str(text: &str) -> Result<Self> {
        Policy::ALL
            .into_iter()
            .find(|policy| policy.name() == text)
            .ok_or_else(|| Error::invalid("policy", format!("{text:?}"), Policy::names()))
    }
}

/// What to do with sequences longer than `t_max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Oversize {
    /// Refuse to plan, naming how many sequences are too long and the longest.
    #[default]
    Reject,
    /// Cut each into chunks of `t_max` steps plus one shorter tail chunk; every cut is counted.
    Split,
}

/// Options of a plan. The defaults are one rank, one block per batch, seed 0, `best_fit`, an
/// error for sequences longer than `t_max`, blocks dealt by steps, and no cap on a block's pieces.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Options {
    /// Steps per block.
    pub t_max: u32,
    /// Blocks in each batch of each rank.
    pub blocks_per_batch: u32,
    /// Number of data-parallel ranks.
    pub world_size: u32,
    /// Seed of every random choice; a plan is a pure function of (lengths, options, epoch).
    pub seed: u64,
    pub policy: Policy,
    pub oversize: Oversize,
    /// How blocks are dealt to ranks. Options saved before it existed read as `steps`.
    #[serde(default)]
    pub cost: Cost,
    /// The most pieces (whole sequences or parts of split ones) a block may hold; `None`: no
    /// cap. Attention kernels and CUDA graphs want a bounded `cu_seqlens`. Options saved before
    /// it existed read as no cap, and options without a cap are written as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pieces: Option<u32>,
}

/// What the `max_pieces` option is, in the words every interface's help uses.
pub const MAX_PIECES_HELP: &str =
    "the most pieces a block holds, at least 1 (default no cap; not with lanes)";

/// The largest seed of a plan that every interface takes: C++ and Python hold a seed in an
/// int64, so a larger one would give a plan (on the command line) no trainer could reproduce.
pub const MAX_SEED: u64 = i64::MAX as u64;

/// Largest `t_max` accepted: the planner keeps per-length tables of `t_max` entries.
pub const MAX_T_MAX: u32 = 1 << 24;

impl Options {
    pub fn new(t_max: u32) -> Self {
        Options {
            t_max,
            blocks_per_batch: 1,
            world_size: 1,
            seed: 0,
            policy: Policy::BestFit,
            oversize: Oversize::Reject,
            cost: Cost::Steps,
            max_pieces: None,
        }
    }

    /// The cap on pieces per block as a number: `u32::MAX` for none, which no block reaches
    /// (a block holds at most `t_max` pieces of at least 1 step).
    pub(crate) fn piece_cap(&self) -> u32 {
        self.max_pieces.unwrap_or(u32::MAX)
    }

    /// Checks the options on their own (the lengths are checked by the planner).
    pub fn validate(&self) -> Result<()> {
        if self.t_max == 0 || self.t_max > MAX_T_MAX {
            return Err(Error::invalid(
                "t_max",
                self.t_max,
                format!("a block size from 1 to {MAX_T_MAX} steps"),
            ));
        }
        if self.world_size == 0 {
            return Err(Error::invalid("world_size", 0, "at least 1 rank"));
        }
        if self.blocks_per_batch == 0 {
            return Err(Error::invalid(
                "blocks_per_batch",
                0,
                "at least 1 block per batch",
            ));
        }
        // cu_seqlens are int32 prefix sums over one batch of one rank.
        let batch_steps = u64::from(self.blocks_per_batch) * u64::from(self.t_max);
        if batch_steps > i32::MAX as u64 {
            return Err(Error::invalid(
                "blocks_per_batch * t_max",
                batch_steps,
                format!(
                    "at most {} steps per batch (cu_seqlens are int32)",
                    i32::MAX
                ),
            ));
        }
        let slots = u64::from(self.blocks_per_batch) * u64::from(self.world_size);
        if slots > u64::from(u32::MAX) {
            return Err(Error::invalid(
                "world_size * blocks_per_batch",
                slots,
                format!("at most {} blocks per global batch", u32::MAX),
            ));
        }
        if self.seed > MAX_SEED {
            // A state holds the seed as an int64: a larger one would be saved as another.
            return Err(Error::invalid(
                "seed",
                self.seed,
                format!("a seed from 0 to {MAX_SEED} (C++ and Python hold it in an int64)"),
            ));
        }
        if let Cost::Attention { linear } = self.cost {
            if linear > MAX_ATTENTION_LINEAR {
                // As `Cost::parse` and `Cost::from_code` refuse it: its code would not round-trip.
                return Err(Error::invalid(
                    "cost",
                    format!("attention:{linear}"),
                    format!("attention:A with A from 0 to {MAX_ATTENTION_LINEAR}"),
                ));
            }
        }
        if self.policy.carries_state() && self.cost != Cost::Steps {
            // A lane's rows hold the same lanes all epoch, each carrying its state from batch
            // to batch: there are no blocks to deal, and moving a lane would break its state.
            return Err(Error::invalid(
                "cost",
                format!("{:?}", self.cost.to_string()),
                "\"steps\" with the lanes policy (its rows are lanes that keep their rank all epoch, \
                 so there is nothing to deal by cost)",
            ));
        }
        match self.max_pieces {
            Some(0) => {
                return Err(Error::invalid(
                    "max_pieces",
                    0,
                    "at least 1 piece per block (or no cap)",
                ));
            }
            Some(cap) if self.policy.carries_state() => {
                // A lane runs its sequences end to end: how many meet in one batch's row is
                // the lengths' to decide, and capping it would break the lane.
                return Err(Error::invalid(
                    "max_pieces",
                    cap,
                    "no cap with the lanes policy (its rows run sequences end to end, so a row \
                     holds as many as end in its steps)",
                ));
            }
            _ => {}
        }
        Ok(())
    }

    /// The options as a JSON object, field by field: how interfaces that store a planner
    /// (the pickled Python planner) keep them.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Options stored by [`Options::to_json`], checked.
    pub fn from_json(text: &str) -> Result<Self> {
        let options: Options = serde_json::from_str(text).map_err(|err| {
            let shown: String = text.chars().take(200).collect();
            Error::invalid("options", shown, format!("options saved by bload ({err})"))
        })?;
        options.validate()?;
        Ok(options)
    }

    /// Blocks in one batch of all ranks together: plans have a multiple of this many blocks.
    pub fn blocks_per_global_batch(&self) -> u64 {
        u64::from(self.world_size) * u64::from(self.blocks_per_batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_policy_has_its_own_code_and_a_bad_code_is_named() {
        for (index, policy) in Policy::ALL.into_iter().enumerate() {
            assert_eq!(policy.code(), index as i64);
            assert_eq!(Policy::from_code(policy.code()).unwrap(), policy);
        }
        for code in [-1, Policy::ALL.len() as i64, i64::MAX] {
            let error = Policy::from_code(code).unwrap_err();
            assert_eq!(error.argument, "policy");
            assert!(
                error.to_string().contains("best_fit, random_fill"),
                "{error}"
            );
        }
    }

    #[test]
    fn bad_options_name_the_argument() {
        let bad = |edit: fn(&mut Options), argument: &str| {
            let mut options = Options::new(94);
            edit(&mut options);
            let err = options.validate().unwrap_err();
            assert_eq!(err.argument, argument);
        };
        bad(|o| o.t_max = 0, "t_max");
        bad(|o| o.t_max = MAX_T_MAX + 1, "t_max");
        bad(|o| o.world_size = 0, "world_size");
        bad(|o| o.blocks_per_batch = 0, "blocks_per_batch");
        bad(
            |o| {
                o.t_max = MAX_T_MAX;
                o.blocks_per_batch = 1000;
            },
            "blocks_per_batch * t_max",
        );
        bad(
            |o| {
                o.policy = Policy::Lanes;
                o.cost = Cost::Attention { linear: 1 };
            },
            "cost",
        );
        bad(|o| o.max_pieces = Some(0), "max_pieces");
        bad(
            |o| {
                o.policy = Policy::Lanes;
                o.max_pieces = Some(4);
            },
            "max_pieces",
        );
        assert!(Options::new(94).validate().is_ok());
    }

    #[test]
    fn options_saved_without_a_cost_read_as_steps() {
        let mut options = Options::new(94);
        options.cost = Cost::Attention { linear: 7 };
        let json = options.to_json();
        assert!(json.contains("\"cost\":\"attention:7\""), "{json}");
        assert_eq!(Options::from_json(&json).unwrap(), options);
        let old = json.replace(",\"cost\":\"attention:7\"", "");
        assert_eq!(Options::from_json(&old).unwrap().cost, Cost::Steps);
        let bad = json.replace("attention:7", "attention:x");
        assert_eq!(Options::from_json(&bad).unwrap_err().argument, "options");
    }

    #[test]
    fn options_round_trip_through_json() {
        let mut options = Options::new(94);
        options.world_size = 3;
        options.policy = Policy::PadToMax;
        options.oversize = Oversize::Split;
        assert_eq!(Options::from_json(&options.to_json()).unwrap(), options);
        let text = options.to_json().replace("94", "0");
        assert_eq!(Options::from_json(&text).unwrap_err().argument, "t_max");
        assert_eq!(Options::from_json("{}").unwrap_err().argument, "options");
    }

    #[test]
    fn a_cap_on_pieces_is_written_only_when_set() {
        let mut options = Options::new(94);
        assert!(!options.to_json().contains("max_pieces"));
        options.max_pieces = Some(12);
        let json = options.to_json();
        assert!(json.contains("\"max_pieces\":12"), "{json}");
        assert_eq!(Options::from_json(&json).unwrap(), options);
        let zero = json.replace(":12", ":0");
        assert_eq!(
            Options::from_json(&zero).unwrap_err().argument,
            "max_pieces"
        );
    }

    #[test]
    fn policies_round_trip_through_their_names() {
        for policy in Policy::ALL {
            assert_eq!(policy.name().parse::<Policy>().unwrap(), policy);
        }
        let err = "bfd".parse::<Policy>().unwrap_err();
        assert_eq!(err.argument, "policy");
        assert_eq!(err.expected, "best_fit, random_fill, pad_to_max or lanes");
    }
}
