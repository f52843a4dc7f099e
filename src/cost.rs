//! The `cost` option: what a block costs a rank to compute, by which `plan/balance.rs` deals
//! blocks to ranks. One parser and one printed form for every interface.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What a block costs a rank to compute, for dealing blocks to ranks (`plan/balance.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Cost {
    /// Every block costs `t_max` steps alike: blocks are dealt in their shuffled order, as
    /// bload always has (`"steps"`).
    #[default]
    Steps,
    /// A piece of `L` steps costs `linear * L + L^2`, as attention does (the `L^2` of the
    /// scores, `linear * L` for the rest of the layer): blocks of like cost share a global
    /// batch and are dealt so that its costliest rank costs least (`"attention:A"`).
    Attention { linear: u64 },
}

/// The largest `A` of `attention:A`: with `L <= t_max <= 2^24`, a block's cost stays below 2^57.
pub const MAX_ATTENTION_LINEAR: u64 = 1 << 32;

impl Cost {
    /// What a piece of `length` steps costs (saturating, though the bounds keep a block's sum
    /// far from it).
    pub fn of_piece(self, length: u32) -> u64 {
        let length = u64::from(length);
        match self {
            Cost::Steps => length,
            Cost::Attention { linear } => linear
                .saturating_mul(length)
                .saturating_add(length * length),
        }
    }

    /// What `expected` says in messages about a cost.
    pub const EXPECTED: &'static str =
        "\"steps\" or \"attention:A\" with A an integer from 0 to 4294967296 (a piece of L steps costs A*L + L^2)";

    /// The cost as one int64, for checks that compare integers (DDP agreement): -1 for steps,
    /// `A` for `attention:A`.
    pub fn code(self) -> i64 {
        match self {
            Cost::Steps => -1,
            Cost::Attention { linear } => linear as i64,
        }
    }

    /// The cost [`Cost::code`] gave `code`.
    pub fn from_code(code: i64) -> Result<Self> {
        match code {
            -1 => Ok(Cost::Steps),
            0.. if code as u64 <= MAX_ATTENTION_LINEAR => Ok(Cost::Attention {
                linear: code as u64,
            }),
            _ => Err(Error::invalid(
                "cost",
                code,
                format!("-1 (steps) or A from 0 to {MAX_ATTENTION_LINEAR} (attention:A)"),
            )),
        }
    }
}

impl fmt::Display for Cost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cost::Steps => f.write_str("steps"),
            Cost::Attention { linear } => write!(f, "attention:{linear}"),
        }
    }
}

impl FromStr for Cost {
    type Err = Error;
    fn from_str(text: &str) -> Result<Self> {
        let refused = || Error::invalid("cost", format!("{text:?}"), Cost::EXPECTED);
        if text == "steps" {
            return Ok(Cost::Steps);
        }
        let linear = text.strip_prefix("attention:").ok_or_else(refused)?;
        // Digits only: no sign, no spaces, no "0x".
        if linear.is_empty() || !linear.bytes().all(|b| b.is_ascii_digit()) {
            return Err(refused());
        }
        match linear.parse::<u64>() {
            Ok(linear) if linear <= MAX_ATTENTION_LINEAR => Ok(Cost::Attention { linear }),
            _ => Err(refused()),
        }
    }
}

// Stored by name ("steps", "attention:4096"), so options in JSON read as they are written.
impl Serialize for Cost {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Cost {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs_round_trip_through_their_names_and_bad_ones_are_named() {
        for cost in [
            Cost::Steps,
            Cost::Attention { linear: 0 },
            Cost::Attention { linear: 4096 },
        ] {
            assert_eq!(cost.to_string().parse::<Cost>().unwrap(), cost);
        }
        assert_eq!(
            "attention:4294967296".parse::<Cost>().unwrap(),
            Cost::Attention {
                linear: MAX_ATTENTION_LINEAR
            }
        );
        for bad in [
            "",
            "Steps",
            "attention",
            "attention:",
            "attention:-1",
            "attention:+3",
            "attention: 3",
            "attention:1.5",
            "attention:4294967297",
            "flops:3",
        ] {
            let err = bad.parse::<Cost>().unwrap_err();
            assert_eq!(err.argument, "cost", "{bad}");
            assert_eq!(err.value, format!("{bad:?}"));
            assert!(err.expected.contains("attention:A"), "{err}");
        }
        assert_eq!(Cost::Attention { linear: 3 }.of_piece(10), 130);
        assert_eq!(Cost::Steps.of_piece(10), 10);
        for cost in [
            Cost::Steps,
            Cost::Attention { linear: 0 },
            Cost::Attention { linear: 9 },
        ] {
            assert_eq!(Cost::from_code(cost.code()).unwrap(), cost);
        }
        assert_eq!(Cost::from_code(-2).unwrap_err().argument, "cost");
    }
}
