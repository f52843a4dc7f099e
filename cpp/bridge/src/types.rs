//! The types C++ shares with Rust by value, each defined here once for C++: `bload::PlanOptions`,
//! `bload::PlanStats`, `bload::EpochPosition`, `bload::GlobalBatch` and `bload::TableColumn` in the generated header
//! `bload-cxx/src/types.rs.h`, which bload's public headers include and use as they are.
//!
//! They are the C++ faces of the core's `Options`, `PlanStats` and `Column`. Each
//! conversion below names every field, so a field added in the core does not compile until its
//! C++ face has it too; no field is ever copied by position. The policy and the cost cross as
//! the core's int64 codes of them, which C++ sets and reads by name through the core: a policy
//! added to the core needs nothing here.
//!
//! This header holds only plain structs and enums (no `rust::String`, no Rust symbols), so a
//! downstream program can copy them without linking anything of Rust's.

use bload::{Column, Error, LowerBound, Oversize, MAX_T_MAX};

#[cxx::bridge(namespace = "bload")]
pub mod ffi {
    /// The options a plan depends on, besides the lengths (the core's `bload::Options`). Values
    /// are torch's int64 and are checked by the core when a planner is made.
    #[derive(Debug, Clone)]
    struct PlanOptions {
        /// Steps per block.
        t_max: i64,
        /// Blocks in each batch of each rank.
        blocks_per_batch: i64,
        /// Data-parallel ranks.
        world_size: i64,
        /// Seed of every random choice: a plan is a pure function of (lengths, options, epoch).
        seed: i64,
        /// How sequences share a block, as the core's int64 of it (`bload::Policy::code`, its
        /// position in `Policy::ALL`); C++ sets and reads it by name through the core, so a
        /// policy added to the core needs nothing here.
        policy: i64,
        /// Cut sequences longer than t_max into chunks instead of rejecting them.
        split_oversized: bool,
        /// How blocks are dealt to ranks, as the core's int64 of it (`bload::Cost::code`: -1 for
        /// "steps", A for "attention:A"; C++ sets and reads it by name through the core). An int,
        /// not a string, so that the struct stays plain data in the public header.
        cost: i64,
        /// The most pieces a block holds (the core's `max_pieces`): -1 for no cap, else at
        /// least 1 (0 and other values are refused by the core, naming max_pieces).
        max_pieces: i64,
    }

    /// What a plan costs (the core's `bload::PlanStats`, flattened). Every padded, deleted or
    /// split step is counted.
    #[derive(Debug, Clone)]
    struct PlanStats {
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
        efficiency: f64,
        lower_bound_blocks_unrounded: u64,
        lower_bound_blocks: u64,
        lower_bound_padding: u64,
        /// The core's `rank_cost_imbalance`: per global batch, the costliest rank's cost over
        /// the mean rank's, in the plan's cost; its mean and worst over the global batches.
        rank_cost_imbalance_mean: f64,
        rank_cost_imbalance_worst: f64,
    }

    /// Where every rank stands in an epoch (the core's `bload::EpochPosition`): what a sampler
    /// saves, to go on with the same world size or another. The blocks of the epoch's plan for
    /// `planned_world_size` ranks from `first_block` on, dealt to `world_size` ranks of
    /// `blocks_per_batch` blocks a batch, of which each has served `batches` batches. Values are torch's int64, checked by the conversion.
    #[derive(Debug, Clone)]
    struct EpochPosition {
        epoch: i64,
        planned_world_size: i64,
        first_block: i64,
        world_size: i64,
        blocks_per_batch: i64,
        batches: i64,
    }

    /// What every rank's batch of one index holds together, the global batch (the core's
    /// `bload::GlobalBatch`): its real steps and its pieces, for the token mean of a loss over
    /// the whole global batch without a collective (docs/ddp.md, "The token mean").
    #[derive(Debug, Clone, Copy, Default)]
    struct GlobalBatch {
        valid: i64,
        pieces: i64,
        /// world_size / valid: what a rank's summed loss is multiplied by (0 for no step).
        loss_scale: f64,
        /// world_size / (valid - pieces), for a causal LM's shifted labels (0 for none).
        shifted_loss_scale: f64,
    }

    /// Columns of a block table row (the core's `bload::Column`): one int64 row per piece.
    #[derive(Debug)]
    enum TableColumn {
        Block = 0,
        BlockOffset = 1,
        Length = 2,
        Sequence = 3,
        Offset = 4,
        SequenceLength = 5,
    }
}

// The C++ enum's values are the core's columns, checked when this crate compiles.
const _: () = {
    use ffi::TableColumn as Cxx;
    let pairs = [
        (Cxx::Block, Column::Block),
        (Cxx::BlockOffset, Column::BlockOffset),
        (Cxx::Length, Column::Length),
        (Cxx::Sequence, Column::Sequence),
        (Cxx::Offset, Column::Offset),
        (Cxx::SequenceLength, Column::SequenceLength),
    ];
    assert!(pairs.len() == Column::COUNT);
    let mut i = 0;
    while i < pairs.len() {
        assert!(pairs[i].0.repr as usize == pairs[i].1 as usize);
        i += 1;
    }
};

/// The values C++ and Python may give each int64 option: the one list their checks and
/// messages use (Python asks for it through `torch.ops.bload.option_bounds`).
const OPTION_BOUNDS: [(&str, i64, i64, &str); 5] = [
    ("t_max", 1, MAX_T_MAX as i64, "steps"),
    ("blocks_per_batch", 1, u32::MAX as i64, "blocks"),
    ("world_size", 1, u32::MAX as i64, "ranks"),
    ("seed", 0, bload::MAX_SEED as i64, ""),
    ("epoch", 0, bload::MAX_EPOCH, ""),
];

pub(crate) fn option_bounds() -> Vec<super::ffi::OptionBound> {
    OPTION_BOUNDS
        .iter()
        .map(|&(name, low, high, _)| super::ffi::OptionBound {
            name: name.into(),
            low,
            high,
        })
        .collect()
}

/// A signed value from C++ that must be a positive `u32` (a count of blocks or ranks).
fn positive_u32(argument: &str, value: i64, unit: &str) -> bload::Result<u32> {
    match u32::try_from(value) {
        Ok(count) if count >= 1 => Ok(count),
        _ => Err(Error::invalid(
            argument,
            value,
            format!("from 1 to {} {unit}", u32::MAX),
        )),
    }
}

/// `value` of the option `name`, checked against its bounds in [`OPTION_BOUNDS`].
fn bounded(name: &str, value: i64) -> bload::Result<i64> {
    let (_, low, high, unit) = OPTION_BOUNDS
        .iter()
        .copied()
        .find(|bound| bound.0 == name)
        .unwrap_or((name, i64::MIN, i64::MAX, ""));
    if (low..=high).contains(&value) {
        return Ok(value);
    }
    let unit = if unit.is_empty() {
        String::new()
    } else {
        format!(" {unit}")
    };
    Err(Error::invalid(
        name,
        value,
        format!("from {low} to {high}{unit}"),
    ))
}

impl From<&bload::Options> for ffi::PlanOptions {
    fn from(options: &bload::Options) -> Self {
        let bload::Options {
            t_max,
            blocks_per_batch,
            world_size,
            seed,
            policy,
            oversize,
            cost,
            max_pieces,
        } = *options;
        ffi::PlanOptions {
            t_max: t_max.into(),
            blocks_per_batch: blocks_per_batch.into(),
            world_size: world_size.into(),
            // Seeds from C++ are int64: the core's u64 seeds above i64::MAX are out of its reach.
            seed: seed as i64,
            policy: policy.code(),
            split_oversized: oversize == Oversize::Split,
            cost: cost.code(),
            max_pieces: max_pieces.map_or(NO_CAP, i64::from),
        }
    }
}

/// C++'s and Python's `max_pieces` for no cap on a block's pieces.
const NO_CAP: i64 = -1;

/// C++'s `max_pieces` as the core's: -1 for none; anything else a count the core checks (so
/// 0 is refused by the core, naming max_pieces, like any value out of `u32`'s range here).
fn max_pieces_of(value: i64) -> bload::Result<Option<u32>> {
    if value == NO_CAP {
        return Ok(None);
    }
    u32::try_from(value).map(Some).map_err(|_| {
        Error::invalid(
            "max_pieces",
            value,
            format!("from 1 to {} pieces per block, or -1 for no cap", u32::MAX),
        )
    })
}

impl TryFrom<&ffi::PlanOptions> for bload::Options {
    type Error = Error;
    fn try_from(options: &ffi::PlanOptions) -> bload::Result<Self> {
        let ffi::PlanOptions {
            t_max,
            blocks_per_batch,
            world_size,
            seed,
            policy,
            split_oversized,
            cost,
            max_pieces,
        } = *options;
        let options = bload::Options {
            // In bounds, so each fits its type.
            t_max: bounded("t_max", t_max)? as u32,
            blocks_per_batch: bounded("blocks_per_batch", blocks_per_batch)? as u32,
            world_size: bounded("world_size", world_size)? as u32,
            seed: bounded("seed", seed)? as u64,
            policy: bload::Policy::from_code(policy)?,
            oversize: if split_oversized {
                Oversize::Split
            } else {
                Oversize::Reject
            },
            cost: bload::Cost::from_code(cost)?,
            max_pieces: max_pieces_of(max_pieces)?,
        };
        options.validate()?;
        Ok(options)
    }
}

impl From<&bload::PlanStats> for ffi::PlanStats {
    fn from(stats: &bload::PlanStats) -> Self {
        let bload::PlanStats {
            sequences,
            steps,
            pieces,
            blocks,
            padding,
            deleted,
            split_sequences,
            split_pieces,
            rounding_blocks,
            rounding_padding,
            empty_blocks,
            efficiency,
            lower_bound:
                LowerBound {
                    blocks_unrounded,
                    blocks: lower_bound_blocks,
                    padding: lower_bound_padding,
                },
            rank_cost_imbalance,
        } = *stats;
        ffi::PlanStats {
            sequences,
            steps,
            pieces,
            blocks,
            padding,
            deleted,
            split_sequences,
            split_pieces,
            rounding_blocks,
            rounding_padding,
            empty_blocks,
            efficiency,
            lower_bound_blocks_unrounded: blocks_unrounded,
            lower_bound_blocks,
            lower_bound_padding,
            rank_cost_imbalance_mean: rank_cost_imbalance.mean,
            rank_cost_imbalance_worst: rank_cost_imbalance.worst,
        }
    }
}

/// A signed value from C++ that must be at least 0 (an epoch, a count of blocks or batches).
fn non_negative(argument: &str, value: i64, expected: &str) -> bload::Result<u64> {
    u64::try_from(value).map_err(|_| Error::invalid(argument, value, expected))
}

impl From<&bload::EpochPosition> for ffi::EpochPosition {
    fn from(position: &bload::EpochPosition) -> Self {
        let bload::EpochPosition {
            epoch,
            planned_world_size,
            first_block,
            world_size,
            blocks_per_batch,
            batches,
        } = *position;
        // Every value was int64 when it came from C++, or is a count of a plan's blocks or
        // batches, which 32-bit piece indices keep far below i64::MAX.
        let int64 = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
        ffi::EpochPosition {
            epoch: int64(epoch),
            planned_world_size: planned_world_size.into(),
            first_block: int64(first_block),
            world_size: world_size.into(),
            blocks_per_batch: blocks_per_batch.into(),
            batches: int64(batches),
        }
    }
}

impl TryFrom<&ffi::EpochPosition> for bload::EpochPosition {
    type Error = Error;
    fn try_from(position: &ffi::EpochPosition) -> bload::Result<Self> {
        let ffi::EpochPosition {
            epoch,
            planned_world_size,
            first_block,
            world_size,
            blocks_per_batch,
            batches,
        } = *position;
        Ok(bload::EpochPosition {
            epoch: non_negative("epoch", epoch, "an epoch of at least 0")?,
            planned_world_size: positive_u32("planned_world_size", planned_world_size, "ranks")?,
            first_block: non_negative("first_block", first_block, "a block count of at least 0")?,
            world_size: positive_u32("world_size", world_size, "ranks")?,
            blocks_per_batch: positive_u32("blocks_per_batch", blocks_per_batch, "blocks")?,
            batches: non_negative("batches", batches, "a batch count of at least 0")?,
        })
    }
}

impl From<bload::GlobalBatch> for ffi::GlobalBatch {
    fn from(global: bload::GlobalBatch) -> Self {
        let bload::GlobalBatch {
            valid,
            pieces,
            loss_scale,
            shifted_loss_scale,
        } = global;
        // Steps of one global batch fit an int64 by far (blocks times t_max, each below 2^31).
        ffi::GlobalBatch {
            valid: valid as i64,
            pieces: pieces as i64,
            loss_scale,
            shifted_loss_scale,
        }
    }
}
