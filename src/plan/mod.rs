//! Epoch plans: which pieces of which sequences fill which block, and which rank and batch each
//! block goes to. A plan is a pure function of (lengths, options, epoch): every rank computes it
//! on its own and takes its shard, with no communication.
//!
//! [`Planner::new`] checks the lengths once and gathers what every epoch needs
//! (`validate.rs`), so planning an epoch can fail only for want of memory, which is an error too
//! (every vector that grows with the input is sized up front, see `alloc.rs`). [`Planner::plan`]
//! then packs lengths into
//! blocks (`pack/`), gives each packed slot a sequence of its length (`identities.rs`), adds the
//! chunks of split sequences (`split.rs`), and brings the blocks to whole global batches and
//! shuffles them (`shard.rs`). The plan stores a piece as just its sequence; blocks expand into
//! [`Piece`]s as they are read (`block.rs`). Plans and lengths have stable hashes (`hash.rs`).
//! [`Planner::resume`] goes on with an epoch part-way, on the same or another world size
//! (`resume.rs`).
//!
//! # What a `Planner` and an `EpochPlan` can do, and where
//!
//! Each file adds the methods of its concern (`impl Planner` / `impl EpochPlan` blocks); this is
//! their one list.
//!
//! | concern | `Planner` | `EpochPlan` | file |
//! |---|---|---|---|
//! | make one, plan an epoch | `new`, `lengths`, `options`, `steps`, `pieces`, `lower_bound`, `plan` | `epoch`, `options`, `stats`, `lengths`, `num_blocks` | `mod.rs` |
//! | lengths of another integer type | `from_lengths` | | `ingest.rs` |
//! | mixtures of sources | `with_sources`, `is_mixture`, `source_names`, `source_starts`, `source_of`, `mixture_text`, `mixture_hash`, `source_stats`, `epoch_lengths` | | `mixture.rs` |
//! | a mixture's saved form | `sources_json`, `with_sources_json` | | `mixture_json.rs` |
//! | the layout in memory (types only) | | | `layout.rs` |
//! | split sequences' pieces | | | `split.rs` |
//! | blocks as pieces | | `block`, `blocks` | `block.rs` |
//! | ranks and batches | | `batches_per_rank`, `batch`, `global_batch`, `rank_batches` | `shard.rs` |
//! | cost across ranks | | `rank_cost_imbalance` | `balance.rs` |
//! | lanes (carried state) | | | `lanes.rs` |
//! | hashes | `lengths_hash` | `hash` | `hash.rs` |
//! | resume part-way | `resume` | `position` | `resume.rs` |
//! | a sampler's checkpoint | `sampler_state`, `resume_sampler_state`, `resume_sampler_state_on_node` | | `state.rs` |
//! | plans shared on a node | `private_memory`, `shared_plan_path`, `write_shared_plan`, `map_shared_plan`, `from_shared_plan`, `from_shared_plan_of`, `with_lengths_of`, `shared_resume_path`, `resume_on_node` | `private_memory`, `is_shared` | `shared/` |
//!
//! A test (`every_public_method_is_listed`, in `tests.rs`) checks this table against the files.

mod balance;
mod block;
mod deal;
mod hash;
mod identities;
mod ingest;
mod lanes;
mod layout;
mod mixture;
mod mixture_json;
mod resume;
mod scatter;
mod shard;
mod shared;
mod split;
mod state;
mod validate;

pub use block::{Block, Piece};
pub use hash::stable_hash;
pub use ingest::{narrow_lengths, LengthInteger};
pub use mixture::{Source, SourceStats};
pub use resume::{EpochPosition, Resumed};
pub use shard::{Batch, GlobalBatch};
pub use shared::{PrivateMemory, MAX_SHARED_PLAN_TIMEOUT_S, SHARED_PLAN_VERSION};
pub use state::{
    ResumedState, SamplerPlace, StateValue, MAX_EPOCH, OPTIONAL_STATE_FIELDS, STATE_VERSION,
};

use crate::alloc::{try_copy, try_with_capacity_huge};
use crate::error::Result;
use crate::options::{Options, Policy};
use crate::pack;
use crate::rng::{PlanRng, Stream};
use crate::stats::{self, LowerBound, PlanStats};
use layout::Span;
use layout::SplitPiece;
use resume::Origin;
use shard::split_blocks_to_reach;
use shared::Column;
use std::sync::{Arc, OnceLock};

/// Plans epochs for fixed lengths and options. Construction checks everything, so planning an
/// epoch fails only where memory runs out.
#[derive(Debug, Clone)]
pub struct Planner {
    /// Shared with every plan, which reads piece lengths from it (mapped from a shared plan
    /// file by a planner made from one).
    lengths: Column<u32>,
    options: Options,
    /// `counts[len]`: sequences whose packed part (see `packed_part`) has `len` steps.
    counts: Vec<u32>,
    /// `class_starts[len]`: sequences with a packed part shorter than `len`; the start of that
    /// length's run when sequences are sorted by packed part.
    class_starts: Vec<u32>,
    /// Sequences longer than `t_max` (split mode), ascending. Each gives `length / t_max` full
    /// chunks, a block each, and its tail (if any) is packed like any sequence.
    oversized: Vec<u32>,
    /// The full chunks of all of them.
    full_chunks: u64,
    /// The fewest blocks the packed parts fit in (full chunks aside).
    packing_bound: u64,
    /// Pieces the oversized sequences are cut into: their full chunks and their tails.
    split_pieces: u64,
    steps: u64,
    /// The longest sequence's steps.
    longest: u32,
    pieces: u64,
    lower_bound: LowerBound,
    /// The sources of a mixture (`mixture.rs`), whose concatenation `lengths` is; none for one
    /// lengths set.
    mixture: Option<Arc<mixture::Mixture>>,
    /// The `best_fit` packing, which depends on the lengths and options and not on the epoch:
    /// made by the first plan and kept for the later ones, as runs of equal blocks (none where
    /// there are too many to keep: `best_fit_packing`).
    kept_packing: OnceLock<Option<pack::BlockRuns>>,
}

impl Planner {
    /// Checks the lengths and options. Errors name the argument, its value and what was expected:
    /// an empty dataset, a zero length, sequences longer than `t_max` (unless split), fewer pieces
    /// than the `world_size * blocks_per_batch` blocks of a global batch, or more than 2^32 - 1
    /// (split sequences cut into that many chunks); and no memory for the per-length tables. The
    /// total of steps is not bounded: epochs of 10^12 steps plan like any other.
    pub fn new(lengths: Vec<u32>, options: Options) -> Result<Self> {
        Self::of_column(Column::Shared(Arc::new(lengths)), options)
    }

    /// [`Planner::new`] of lengths held in a column (a shared plan file's: `shared/`).
    fn of_column(lengths: Column<u32>, options: Options) -> Result<Self> {
        let gathered = validate::gather(&lengths, &options)?;
        Ok(Self::with_gathered(lengths, options, gathered))
    }

    /// The planner of valid lengths and what `validate.rs` gathered from them.
    fn with_gathered(lengths: Column<u32>, options: Options, gathered: validate::Gathered) -> Self {
        Planner {
            lengths,
            options,
            counts: gathered.counts,
            class_starts: gathered.class_starts,
            oversized: gathered.oversized,
            full_chunks: gathered.full_chunks,
            split_pieces: gathered.split_pieces,
            packing_bound: gathered.packing_bound,
            steps: gathered.steps,
            longest: gathered.longest,
            pieces: gathered.pieces,
            lower_bound: gathered.lower_bound,
            mixture: None,
            kept_packing: OnceLock::new(),
        }
    }

    pub fn lengths(&self) -> &[u32] {
        &self.lengths
    }

    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Steps of all sequences.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Pieces every plan places: one per sequence, or its chunks when split.
    pub fn pieces(&self) -> u64 {
        self.pieces
    }

    /// The least padding any plan of these lengths and options can have.
    pub fn lower_bound(&self) -> LowerBound {
        self.lower_bound
    }

    /// The plan of `epoch` (0 to `MAX_EPOCH`): the same on every rank and machine for the same
    /// inputs. Its errors: an epoch beyond `MAX_EPOCH`, running out of memory for it (named with
    /// what was being built and its size), for lengths mapped from a shared plan file a file
    /// changed in place since it was mapped, and for a mixture an epoch's choice the options
    /// cannot plan (too few pieces for a global batch).
    pub fn plan(&self, epoch: u64) -> Result<EpochPlan> {
        if epoch > MAX_EPOCH as u64 {
            // A checkpoint holds the epoch in an int64 (as C++ and Python do): a later one would
            // be saved as another, or as none.
            return Err(crate::Error::invalid(
                "epoch",
                epoch,
                format!("an epoch from 0 to {MAX_EPOCH}"),
            ));
        }
        // Lengths mapped from a shared plan file: the file still holds them.
        self.lengths.check_mapped()?;
        if let Some(mixture) = &self.mixture {
            return self.plan_mixture(mixture, epoch);
        }
        let options = &self.options;
        let packing = match options.policy {
            // Lanes run whole sequences end to end: nothing to pack (lanes.rs).
            Policy::Lanes => return self.plan_lanes(epoch),
            Policy::BestFit => self.best_fit_packing()?,
            Policy::RandomFill => {
                let mut rng = PlanRng::new(options.seed, epoch, Stream::RandomFill);
                pack::random_fill(&self.counts, options.t_max, options.piece_cap(), &mut rng)?
            }
            Policy::PadToMax => pack::one_per_block(&self.counts)?,
        };
        // The packers size the block ends for the most blocks a packing could have, about twice
        // as many as it has: an exact copy saves a byte per sequence at the peak, which comes
        // next (the scratch of `sequences_for`). A kept packing's are exact already.
        let ends = if packing.ends.len() == packing.ends.capacity() {
            packing.ends
        } else {
            let exact = try_copy("the ends of the packed blocks", &packing.ends)?;
            drop(packing.ends);
            exact
        };
        // First, so that its scratch is gone before the blocks are allocated (a lower peak).
        let piece_sequences = self.sequences_for(packing.lengths, epoch)?;
        // The packed blocks and a block per full chunk, rounded up to whole global batches: all
        // the blocks there will be, allocated at once.
        let packed_blocks = ends.len() as u64 + self.full_chunks;
        let blocks = stats::round_up(packed_blocks, options.blocks_per_global_batch());
        // (Past usize, as on a 32-bit machine, it is as out of reach as memory can be.)
        let capacity = usize::try_from(blocks).unwrap_or(usize::MAX);
        // Shuffled whole below (`BlockOrder`).
        let mut spans = try_with_capacity_huge("the plan's blocks", capacity)?;
        let mut start = 0;
        for &end in &ends {
            spans.push(Span { start, end });
            start = end;
        }
        let mut plan = EpochPlan {
            epoch,
            options: options.clone(),
            lengths: self.lengths.clone(),
            piece_sequences: piece_sequences.into(),
            split_pieces: Column::default(),
            spans: spans.into(),
            stats: PlanStats::default(),
            measured: OnceLock::new(),
            origin: Origin::own(options.world_size),
        };
        self.add_split_pieces(&mut plan)?;

        let spans = plan.spans.vec("the plan's blocks")?;
        let empty_blocks = split_blocks_to_reach(spans, capacity);
        PlanRng::new(options.seed, epoch, Stream::BlockOrder).shuffle(spans);
        plan.deal_by_cost()?;

        let t_max = u64::from(options.t_max);
        let padding = blocks * t_max - self.steps;
        let rounding_blocks = blocks - packed_blocks;
        plan.stats = PlanStats {
            sequences: self.lengths.len() as u64,
            steps: self.steps,
            pieces: self.pieces,
            blocks,
            padding,
            deleted: 0,
            split_sequences: self.oversized.len() as u64,
            split_pieces: self.split_pieces,
            rounding_blocks,
            rounding_padding: rounding_blocks * t_max,
            empty_blocks,
            efficiency: stats::efficiency(self.steps, 0, padding),
            lower_bound: self.lower_bound,
            // Measured when the stats are first read (`EpochPlan::stats`).
            rank_cost_imbalance: Default::default(),
        };
        Ok(plan)
    }

    /// The `best_fit` packing of the lengths: laid out from the runs an earlier plan kept, or
    /// made (and kept, `pack::BlockRuns`). The same packing either way: nothing an epoch changes
    /// goes into it, and on sets of tens of thousands of sequences its improvement search is
    /// most of a first plan's time.
    fn best_fit_packing(&self) -> Result<pack::Packing> {
        if let Some(Some(runs)) = self.kept_packing.get() {
            return runs.packing();
        }
        let options = &self.options;
        let cap = options.piece_cap();
        let packing = pack::best_fit(&self.counts, options.t_max, cap, self.packing_bound)?;
        if self.kept_packing.get().is_none() {
            // (Another thread's plan may have kept the same runs first.)
            let _ = self.kept_packing.set(pack::BlockRuns::of(&packing)?);
        }
        Ok(packing)
    }
}

/// One epoch's plan: blocks in their (shuffled) order, sharded to ranks and batches.
///
/// Global batch `g` is blocks `g * W * B .. (g + 1) * W * B`; rank `r` takes the `B` blocks from
/// `(g * W + r) * B`. Every rank therefore runs the same number of batches of exactly `B` blocks.
///
/// Pieces are stored compactly, 4 bytes each: the sequence. A piece is the whole sequence unless
/// the sequence was split; the plan expands them into [`Piece`]s when a block is read.
#[derive(Debug, Clone)]
pub struct EpochPlan {
    epoch: u64,
    options: Options,
    lengths: Column<u32>,
    /// The sequence of every piece, in packing order; blocks are spans of it.
    piece_sequences: Column<u32>,
    /// The pieces of split sequences (split mode only), ascending by position.
    split_pieces: Column<SplitPiece>,
    /// Columns are the plan's own, or mapped from a shared plan file (`shared/`).
    spans: Column<Span>,
    /// The counts, known when the plan is made; `rank_cost_imbalance` is not filled in.
    stats: PlanStats,
    /// The counts with the imbalance measured, made the first time the stats are read: measuring
    /// expands every piece of every block, which can take as long as planning the epoch, so a
    /// plan that is only served never pays for it.
    measured: OnceLock<PlanStats>,
    /// Where its blocks come from: its own world size's plan, or another's it resumes.
    origin: Origin,
}

impl EpochPlan {
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn options(&self) -> &Options {
        &self.options
    }

    /// What the plan costs. The first call measures `rank_cost_imbalance` (a pass over every
    /// piece of every block); later calls return the same stats.
    pub fn stats(&self) -> &PlanStats {
        self.measured.get_or_init(|| PlanStats {
            rank_cost_imbalance: self.rank_cost_imbalance(self.options.cost),
            ..self.stats.clone()
        })
    }

    /// The lengths the plan was made from.
    pub fn lengths(&self) -> &[u32] {
        &self.lengths
    }

    pub fn num_blocks(&self) -> usize {
        self.spans.len()
    }
}

#[cfg(test)]
mod tests;
