//! How an [`EpochPlan`](super::EpochPlan) lies in memory, in its own columns and in shared plan
//! files alike: each block a [`Span`] of the plan's pieces, and the few pieces of split sequences
//! listed apart as [`SplitPiece`]s. Types only, used by the files that write a plan
//! (`split.rs`, `shard.rs`, `lanes.rs`, ...) and the one that reads its blocks (`block.rs`), so
//! that none of those depends on another for them.

/// Where a block's pieces lie in the plan's piece arrays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)] // stored as it lies in memory in shared plan files
pub(super) struct Span {
    pub(super) start: u32,
    pub(super) end: u32,
}

/// Where a piece of a split sequence lies in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)] // stored as it lies in memory in shared plan files
pub(super) struct SplitPiece {
    /// The piece's position in the plan's pieces.
    pub(super) position: u32,
    pub(super) offset: u32,
    pub(super) length: u32,
}
