//! An epoch resumed part-way (`plan/resume.rs`) shared on the node like any other: every rank
//! loads the same saved position, so the node's planning rank resumes it and writes the plan it
//! serves into a file named after the position, and every local rank maps that file. The rest
//! of the epoch is then served bit for bit as [`Planner::resume`] would serve it on each rank.

use super::retire::retire_old_epochs;
use super::{write_file, Planner};
use crate::error::Result;
use crate::plan::{EpochPosition, Resumed};
use std::path::{Path, PathBuf};
use std::time::Duration;

impl Planner {
    /// Where in `dir` the plan that resumes `at` is shared. A position whose plan is the epoch's
    /// own whole plan (the same world size, from block 0, or any lanes epoch, which is never
    /// re-dealt) shares the epoch's file ([`Planner::shared_plan_path`]); any other, a file named
    /// after the position too, so that ranks find it from the position alone.
    pub fn shared_resume_path(&self, dir: &Path, at: &EpochPosition) -> PathBuf {
        let path = Self::shared_plan_path(dir, &self.options, at.epoch);
        if self.resumes_own_plan(at) {
            return path;
        }
        let name = path
            .file_stem()
            .and_then(|stem| stem.to_str())
            .unwrap_or("");
        dir.join(format!(
            "{name}-resume-{}-{}-{}x{}-{}.plan",
            at.planned_world_size, at.first_block, at.world_size, at.blocks_per_batch, at.batches
        ))
    }

    /// [`Planner::resume`] shared on the node: when `writes` (the node's planning rank), the
    /// rest of the epoch is resumed and written into `dir` (atomically, as
    /// [`Planner::write_shared_plan`] writes); every rank, that one too, then maps the file
    /// (waiting up to `timeout` for it), checked against this planner and the position: the
    /// same plan and batches served as [`Planner::resume`] gives. A rank that does not write
    /// checks what it can of `at` itself; the bounds that need the plan are the writer's to
    /// check, and a writer that refused the position leaves its readers an error naming the
    /// file after `timeout`.
    pub fn resume_on_node(
        &self,
        at: &EpochPosition,
        dir: &Path,
        writes: bool,
        timeout: Duration,
    ) -> Result<Resumed> {
        self.check_shareable()?;
        self.check_resumable(at)?;
        let path = self.shared_resume_path(dir, at);
        if writes {
            let resumed = self.resume(at)?;
            write_file(&resumed.plan, self.lengths_hash(), &path, dir)?;
            retire_old_epochs(dir, &self.options, at.epoch);
        }
        let own = self.resumes_own_plan(at);
        let plan = self.map_file(&path, at.epoch, timeout, (!own).then_some(at))?;
        // As `resume` counts them: a plan of the saved world size goes on from the batches
        // served, one re-dealt to another starts afresh.
        let keeps_batches =
            self.options.policy.carries_state() || at.world_size == self.options.world_size;
        let batches = if keeps_batches {
            usize::try_from(at.batches).unwrap_or(usize::MAX)
        } else {
            0
        };
        plan.position(batches)?;
        Ok(Resumed { plan, batches })
    }

    /// Whether the plan that resumes `at` is the epoch's own whole plan for this world size.
    fn resumes_own_plan(&self, at: &EpochPosition) -> bool {
        let world_size = self.options.world_size;
        self.options.policy.carries_state()
            || (at.planned_world_size, at.first_block, at.world_size) == (world_size, 0, world_size)
    }
}
