//! Plans shared on a node: one process plans an epoch into a file that every local rank maps
//! (docs/shared_plans.md). The file's pages are the page cache's, so the ranks of a node hold one
//! plan between them instead of one each; a rank's own memory is what its planner keeps apart
//! from the lengths (a few tables of `t_max` entries).
//!
//! A plan is written to a temporary name, flushed to disk and renamed, so a reader never sees a
//! half-written file; readers wait for the name to appear, up to a timeout that turns a writer
//! that never comes into an error naming the file. A file of other lengths, options or epoch, of
//! another version, or damaged, is refused with an error naming it and the field.

mod column;
mod file;
mod mapping;
mod open;
mod ranges;
mod resumed;
mod retire;

pub(crate) use column::Column;
pub use file::SHARED_PLAN_VERSION;

/// The longest a rank waits for its node's shared plan, in seconds (a year): past it (or at
/// infinity) a wait would be forever, or overflow a clock. Every interface refuses more.
pub const MAX_SHARED_PLAN_TIMEOUT_S: f64 = 365.0 * 24.0 * 3600.0;

use super::layout::{Span, SplitPiece};
use super::{EpochPlan, EpochPosition, Planner};
use crate::error::{Error, Result};
use crate::options::Options;
use column::Plain;
use serde::Serialize;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

// SAFETY: `#[repr(C)]` records of `u32`s (shard.rs, split.rs): no padding, any bits valid.
unsafe impl Plain for Span {}
unsafe impl Plain for SplitPiece {}

/// Memory a planner or plan holds of its own, beyond what it maps from a shared plan file: the
/// figure a rank that serves a shared plan keeps under a byte a sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct PrivateMemory {
    /// Bytes of the vectors it owns (their capacity).
    pub bytes: u64,
    /// How many such vectors (non-empty ones).
    pub allocations: u64,
}

impl PrivateMemory {
    fn add(&mut self, bytes: usize) -> &mut Self {
        if bytes > 0 {
            self.bytes += bytes as u64;
            self.allocations += 1;
        }
        self
    }
}

impl EpochPlan {
    /// The memory this plan holds of its own: none for the columns of a mapped plan (the
    /// lengths of a private plan are its planner's, counted there).
    pub fn private_memory(&self) -> PrivateMemory {
        let mut memory = PrivateMemory::default();
        memory
            .add(self.lengths.private_bytes())
            .add(self.piece_sequences.private_bytes())
            .add(self.split_pieces.private_bytes())
            .add(self.spans.private_bytes());
        memory
    }

    /// Whether the plan is read from a mapped shared plan file.
    pub fn is_shared(&self) -> bool {
        self.spans.is_mapped()
    }
}

impl Planner {
    /// The memory this planner holds of its own: its lengths (none when mapped from a shared
    /// plan file), its per-length tables and the packing it keeps (`pack::BlockRuns`).
    pub fn private_memory(&self) -> PrivateMemory {
        let mut memory = PrivateMemory::default();
        let lengths = match &self.lengths {
            Column::Mapped { .. } => 0,
            Column::Shared(lengths) => lengths.capacity() * 4,
            Column::Owned(lengths) => lengths.capacity() * 4,
        };
        memory
            .add(lengths)
            .add(self.counts.capacity() * 4)
            .add(self.class_starts.capacity() * 4)
            .add(self.oversized.capacity() * 4)
            .add(
                self.kept_packing
                    .get()
                    .and_then(Option::as_ref)
                    .map_or(0, |runs| runs.bytes()),
            );
        memory
    }

    /// Where in `dir` the plan of `epoch` under these options is shared: a name of the options
    /// (their JSON's stable hash) and the epoch, so a rank that has only the options finds it.
    pub fn shared_plan_path(dir: &Path, options: &Options, epoch: u64) -> PathBuf {
        dir.join(format!("{}{epoch}.plan", plan_name_prefix(options)))
    }

    /// A mixture's epochs choose their sequences anew (mixture.rs), which the file does not yet
    /// record: refused rather than served as one lengths set.
    fn refuse_mixture(&self) -> Result<()> {
        match self.mixture {
            Some(_) => Err(Error::invalid(
                "shared_plan_dir",
                "a plan shared on a node for a mixture of sources",
                "a planner of one lengths set (mixtures are not yet shared on a node)",
            )),
            None => Ok(()),
        }
    }

    /// Plans `epoch` and writes it into `dir` for the other ranks of the node (the one rank per
    /// node that plans calls this): atomically, to a temporary name, flushed, then renamed over
    /// any older file of the name. Returns the file's path; the plan itself is dropped, so that
    /// the writer too maps the file ([`Planner::map_shared_plan`]) and holds no copy of its own.
    pub fn write_shared_plan(&self, epoch: u64, dir: &Path) -> Result<PathBuf> {
        self.check_shareable()?;
        let plan = self.plan(epoch)?;
        let path = Self::shared_plan_path(dir, &self.options, epoch);
        write_file(&plan, self.lengths_hash(), &path, dir)?;
        retire::retire_old_epochs(dir, &self.options, epoch);
        Ok(path)
    }

    /// The plan of `epoch` mapped from the file another local rank writes into `dir` (waiting
    /// up to `timeout` for it to appear), checked against this planner: the same lengths (count
    /// and hash), options and epoch, else an error naming the file and what differs.
    pub fn map_shared_plan(&self, epoch: u64, dir: &Path, timeout: Duration) -> Result<EpochPlan> {
        let path = Self::shared_plan_path(dir, &self.options, epoch);
        self.map_file(&path, epoch, timeout, None)
    }

    /// A planner and its plan of `epoch`, both read from the file another local rank writes into
    /// `dir` for these options (waiting up to `timeout`): for a rank that does not hold the
    /// lengths at all. Its lengths are the file's, so it holds only its per-length tables; the
    /// agreement check across ranks (which compares the lengths' hash) still tells a file of
    /// other lengths from the ranks' own.
    pub fn from_shared_plan(
        options: Options,
        epoch: u64,
        dir: &Path,
        timeout: Duration,
    ) -> Result<(Planner, EpochPlan)> {
        Self::from_file(options, None, epoch, dir, timeout)
    }

    /// [`Planner::from_shared_plan`] for a rank that knows the hash of the job's lengths
    /// (`Planner::lengths_hash`, e.g. broadcast by a rank that holds them, or saved beside the
    /// lengths) but not the lengths: a file of other lengths under the same options (another
    /// job's plan in a shared directory) is refused, naming both hashes, rather than served.
    pub fn from_shared_plan_of(
        options: Options,
        lengths_hash: u64,
        epoch: u64,
        dir: &Path,
        timeout: Duration,
    ) -> Result<(Planner, EpochPlan)> {
        Self::from_file(options, Some(lengths_hash), epoch, dir, timeout)
    }

    /// A planner and plan read from the file of `epoch` under `options` in `dir`, its lengths
    /// checked against `lengths_hash` where the rank knows it.
    fn from_file(
        options: Options,
        lengths_hash: Option<u64>,
        epoch: u64,
        dir: &Path,
        timeout: Duration,
    ) -> Result<(Planner, EpochPlan)> {
        options.validate()?;
        let path = Self::shared_plan_path(dir, &options, epoch);
        let (map, header) = open(&path, timeout)?;
        check_identity(&header, &path, &options, epoch)?;
        if let Some(hash) = lengths_hash {
            check_lengths_hash(&header, &path, hash, None)?;
        }
        let plan = file::plan_of(&map, header, &path)?;
        check_origin(&plan, &path, None)?;
        let planner = Planner::of_column(plan.lengths.clone(), options)?;
        Ok((planner, plan))
    }

    /// This planner with its lengths read from `plan`, a plan mapped from a shared plan file of
    /// the same lengths, in place of its own: the planner a rank keeps once it serves shared
    /// plans, holding only its per-length tables (its own lengths are freed with the last
    /// planner or private plan that holds them). Later epochs are planned from the mapped
    /// lengths, as from its own. A plan not mapped from a file leaves the lengths as they are;
    /// a file of other lengths is an error naming them.
    pub fn with_lengths_of(&self, plan: &EpochPlan) -> Result<Planner> {
        let mut planner = self.clone();
        if plan.is_shared() {
            // Compared whole below: the file still holds what was mapped.
            plan.lengths.check_mapped()?;
            if *plan.lengths != *self.lengths {
                return Err(Error::invalid(
                    "plan",
                    format!("a shared plan of {} sequences", plan.lengths.len()),
                    format!(
                        "a plan of this planner's lengths ({} of hash {:#018x})",
                        self.lengths.len(),
                        self.lengths_hash()
                    ),
                ));
            }
            planner.lengths = plan.lengths.clone();
        }
        Ok(planner)
    }

    /// Plans can be shared by this planner on this machine: one lengths set, little-endian.
    fn check_shareable(&self) -> Result<()> {
        self.refuse_mixture()?;
        if cfg!(target_endian = "big") {
            let expected = "a little-endian machine (shared plan files are little-endian)";
            return Err(Error::invalid(
                "shared plan",
                "this big-endian machine",
                expected,
            ));
        }
        Ok(())
    }

    /// The plan of `epoch` in the file at `path` (waiting up to `timeout` for it), checked
    /// against this planner; its origin is its own world size's whole epoch, or, for the rest
    /// of an epoch resumed from `resumed` (`shared/resumed.rs`), that position's plan.
    fn map_file(
        &self,
        path: &Path,
        epoch: u64,
        timeout: Duration,
        resumed: Option<&EpochPosition>,
    ) -> Result<EpochPlan> {
        self.refuse_mixture()?;
        let (map, header) = open(path, timeout)?;
        check_identity(&header, path, &self.options, epoch)?;
        check_lengths_hash(&header, path, self.lengths_hash(), Some(self.lengths.len()))?;
        let plan = file::plan_of(&map, header, path)?;
        check_origin(&plan, path, resumed)?;
        Ok(plan)
    }
}

/// What every plan file's name under `options` starts with, its epoch next: the stable hash of
/// the options' JSON, so a rank that has only the options finds the file.
fn plan_name_prefix(options: &Options) -> String {
    let hash = file::stable_text_hash(&options.to_json());
    format!("bload-plan-{hash:016x}-epoch")
}

/// Writes `plan` (of lengths of `lengths_hash`) to `path` in `dir`: under a temporary name,
/// flushed to disk, renamed, the directory flushed, so a reader never opens half a file.
fn write_file(plan: &EpochPlan, lengths_hash: u64, path: &Path, dir: &Path) -> Result<()> {
    let io = |what: &str, at: &Path, err: std::io::Error| {
        Error::invalid(
            format!("shared plan file {}", at.display()),
            format!("{what}: {err}"),
            "a directory this rank can write",
        )
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.subsec_nanos());
    let temporary = dir.join(format!(
        ".{}.{}-{nanos}.tmp",
        path.file_name()
            .and_then(|name| name.to_str())
            .unwrap_or("plan"),
        std::process::id()
    ));
    let written = (|| {
        let file = File::create(&temporary).map_err(|err| io("create", &temporary, err))?;
        let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
        file::write(plan, lengths_hash, &mut out)?;
        let file = out
            .into_inner()
            .map_err(|err| io("write", &temporary, err.into_error()))?;
        file.sync_all()
            .map_err(|err| io("fsync", &temporary, err))?;
        std::fs::rename(&temporary, path).map_err(|err| io("rename", path, err))?;
        // The rename itself made durable: the directory's entry flushed too.
        if let Ok(directory) = File::open(dir) {
            let _ = directory.sync_all();
        }
        Ok(())
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

/// An error about the file at `path`: its `field` had `value`, `expected` was wanted.
fn refused(
    path: &Path,
    field: &str,
    value: impl std::fmt::Display,
    expected: impl Into<String>,
) -> Error {
    Error::invalid(
        format!("shared plan file {} ({field})", path.display()),
        value,
        expected,
    )
}

use open::{check_identity, check_lengths_hash, check_origin, open};

#[cfg(test)]
mod tests;
