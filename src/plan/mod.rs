//! Epoch plans: which pieces of which sequences fill which block, and which rank and batch each
//! block goes to. A plan is a pure function of (lengths, options, epoch): every rank computes it
//! on its own and takes its shard, with no communication.

use crate::error::{Error, Result};
use crate::options::{Options, Oversize, Policy};
use crate::pack;
use crate::rng::{PlanRng, Stream};
use crate::stats::{self, LowerBound, PlanStats};
use serde::Serialize;
use std::sync::Arc;

/// A run of consecutive steps of one sequence, placed in a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Piece {
    /// The sequence's index in the lengths the plan was made from.
    pub index: u32,
    /// Where the piece starts inside its sequence.
    pub offset: u32,
    /// Steps in the piece.
    pub length: u32,
    /// Where the piece starts inside its block.
    pub block_offset: u32,
    /// The piece carries on from the previous piece of the same sequence (its `offset` is not 0).
    pub continues: bool,
}

/// Plans epochs for fixed lengths and options. Construction checks everything, so planning an
/// epoch cannot fail.
#[derive(Debug, Clone)]
pub struct Planner {
    /// Shared with every plan, which reads piece lengths from it.
    lengths: Arc<Vec<u32>>,
    options: Options,
    /// `counts[len]`: sequences whose packed part (see `packed_part`) has `len` steps.
    counts: Vec<u32>,
    /// `class_starts[len]`: sequences with a packed part shorter than `len`; the start of that
    /// length's run when sequences are sorted by packed part.
    class_starts: Vec<u32>,
    /// Sequences longer than `t_max` (split mode), ascending. Each gives `length / t_max` full
    /// chunks, a block each, and its tail (if any) is packed like any sequence.
    oversized: Vec<u32>,
    /// The fewest blocks the packed parts fit in (full chunks aside).
    packing_bound: u64,
    /// Pieces the oversized sequences are cut into: their full chunks and their tails.
    split_pieces: u64,
    steps: u64,
    pieces: u64,
    lower_bound: LowerBound,
}

impl Planner {
    /// Checks the lengths and options. Errors name the argument, its value and what was expected:
    /// an empty dataset, a zero length, a total over 32 bits, sequences longer than `t_max` (unless
    /// split), or fewer pieces than ranks.
    pub fn new(lengths: Vec<u32>, options: Options) -> Result<Self> {
        options.validate()?;
        if lengths.is_empty() {
            return Err(Error::invalid(
                "lengths",
                "an empty list",
                "at least one sequence",
            ));
        }
        if lengths.len() as u64 > u64::from(u32::MAX) {
            return Err(Error::invalid(
                "lengths",
                format!("{} sequences", lengths.len()),
                format!("at most {} sequences (plans use 32-bit indices)", u32::MAX),
            ));
        }
        let t_max = options.t_max;
        // One pass over the lengths gathers everything the checks and the packers need.
        let mut counts = vec![0u32; t_max as usize + 1];
        let (mut steps, mut longest) = (0u64, 0u32);
        let mut oversized = Vec::new();
        for (index, &length) in (0u32..).zip(&lengths) {
            steps += u64::from(length);
            longest = longest.max(length);
            if length > t_max {
                oversized.push(index);
            }
            counts[packed_part(length, t_max) as usize] += 1;
        }
        if counts[0] > 0 {
            // Zero-length sequences, or oversized ones that divide into full chunks exactly.
            let first = lengths.iter().position(|&length| length == 0);
            if let Some(first) = first {
                let zeros = lengths.iter().filter(|&&length| length == 0).count();
                return Err(Error::invalid(
                    format!("lengths[{first}]"),
                    0,
                    format!("every sequence to have at least 1 step ({zeros} have 0)"),
                ));
            }
            // Chunks with no tail leave nothing to pack.
            counts[0] = 0;
        }
        if steps > u64::from(u32::MAX) {
            return Err(Error::invalid(
                "sum of lengths",
                steps,
                format!(
                    "at most {} steps per epoch (plans use 32-bit offsets)",
                    u32::MAX
                ),
            ));
        }
        if !oversized.is_empty() && options.oversize == Oversize::Reject {
            return Err(Error::invalid(
                "t_max",
                t_max,
                format!(
                    "at least the longest sequence ({longest} steps): {} sequences are longer \
                     than t_max; raise t_max or choose split mode to cut them into chunks",
                    oversized.len()
                ),
            ));
        }
        let full_chunks: u64 = oversized
            .iter()
            .map(|&index| u64::from(lengths[index as usize] / t_max))
            .sum();
        let tails = oversized
            .iter()
            .filter(|&&index| lengths[index as usize] % t_max > 0)
            .count() as u64;
        let packed_parts: u64 = counts.iter().map(|&count| u64::from(count)).sum();
        let pieces = full_chunks + packed_parts;
        if pieces < u64::from(options.world_size) {
            return Err(Error::invalid(
                "world_size",
                options.world_size,
                format!(
                    "at most {pieces}: the lengths fill only {pieces} blocks even with one piece \
                     per block, fewer blocks than ranks"
                ),
            ));
        }

        let mut class_starts = vec![0u32; t_max as usize + 2];
        for length in 1..=t_max as usize {
            class_starts[length + 1] = class_starts[length] + counts[length];
        }

        let packing_bound = stats::packing_bound(&counts);
        let lower_bound = stats::lower_bound(packing_bound, full_chunks, steps, &options);
        Ok(Planner {
            lengths: Arc::new(lengths),
            options,
            counts,
            class_starts,
            oversized,
            split_pieces: full_chunks + tails,
            packing_bound,
            steps,
            pieces,
            lower_bound,
        })
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

    /// A stable 64-bit fingerprint of the lengths (FNV-1a, like [`EpochPlan::hash`]): a saved
    /// position in an epoch is only meaningful for the same lengths.
    pub fn lengths_hash(&self) -> u64 {
        let mut hash = StableHash::new();
        hash.add(self.lengths.len() as u64);
        for &length in self.lengths.iter() {
            hash.add(u64::from(length));
        }
        hash.finish()
    }

    /// The least padding any plan of these lengths and options can have.
    pub fn lower_bound(&self) -> LowerBound {
        self.lower_bound
    }

    /// The plan of `epoch`: the same on every rank and machine for the same inputs.
    pub fn plan(&self, epoch: u64) -> EpochPlan {
        let options = &self.options;
        let packing = match options.policy {
            Policy::BestFit => pack::best_fit(&self.counts, options.t_max, self.packing_bound),
            Policy::RandomFill => {
                let mut rng = PlanRng::new(options.seed, epoch, Stream::RandomFill);
                pack::random_fill(&self.counts, options.t_max, &mut rng)
            }
            Policy::PadToMax => pack::one_per_block(&self.counts),
        };
        let mut plan = EpochPlan {
            epoch,
            options: options.clone(),
            lengths: Arc::clone(&self.lengths),
            piece_sequences: self.sequences_for(packing.lengths, epoch),
            split_pieces: Vec::new(),
            spans: Vec::new(),
            stats: PlanStats::default(),
        };
        let mut start = 0;
        for &end in &packing.ends {
            plan.spans.push(Span { start, end });
            start = end;
        }
        self.add_split_pieces(&mut plan);

        let packed_blocks = plan.spans.len() as u64;
        let blocks = stats::round_up(packed_blocks, options.blocks_per_global_batch());
        let empty_blocks = split_blocks_to_reach(&mut plan.spans, blocks as usize);
        PlanRng::new(options.seed, epoch, Stream::BlockOrder).shuffle(&mut plan.spans);

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
        };
        plan
    }

    /// Which sequence fills each packed slot. Sequences whose packed parts have the same length
    /// are interchangeable to the packer; shuffling them per epoch changes the company each
    /// sequence keeps in its block from epoch to epoch.
    ///
    /// Works in place: each packed length is replaced by the sequence that fills it.
    fn sequences_for(&self, mut slots: Vec<u32>, epoch: u64) -> Vec<u32> {
        // Counting sort by packed length (ascending index within a length). Done per epoch
        // rather than kept: it costs about what copying a kept one would, and saves the memory.
        let t_max = self.options.t_max;
        let starts = &self.class_starts;
        let mut members = vec![0u32; starts[t_max as usize + 1] as usize];
        let mut next = starts.clone();
        for (index, &length) in (0u32..).zip(self.lengths.iter()) {
            let part = packed_part(length, t_max);
            if part > 0 {
                members[next[part as usize] as usize] = index;
                next[part as usize] += 1;
            }
        }
        // Shuffle each length's run, then hand its members out in order. (Drawing lazily as
        // slots come up would touch every run at random and miss the cache on each slot.)
        let mut rng = PlanRng::new(self.options.seed, epoch, Stream::Identities);
        for run in starts.windows(2) {
            rng.shuffle(&mut members[run[0] as usize..run[1] as usize]);
        }
        let mut next = starts.clone();
        for slot in &mut slots {
            let length = *slot as usize;
            *slot = members[next[length] as usize];
            next[length] += 1;
        }
        slots
    }

    /// Split mode: records where each oversized sequence's packed tail starts and how long it
    /// is, and adds its full chunks, a block each.
    fn add_split_pieces(&self, plan: &mut EpochPlan) {
        if self.oversized.is_empty() {
            return;
        }
        let t_max = self.options.t_max;
        // A bitset, not a look-up of every piece's length: that read would miss the cache for
        // every piece of a large dataset.
        let mut is_oversized = vec![0u64; self.lengths.len().div_ceil(64)];
        for &index in &self.oversized {
            is_oversized[index as usize / 64] |= 1 << (index % 64);
        }
        for (position, &index) in (0u32..).zip(&plan.piece_sequences) {
            if is_oversized[index as usize / 64] >> (index % 64) & 1 == 1 {
                let length = self.lengths[index as usize];
                plan.split_pieces.push(SplitPiece {
                    position,
                    offset: length - length % t_max,
                    length: length % t_max,
                });
            }
        }
        for &index in &self.oversized {
            for chunk in 0..self.lengths[index as usize] / t_max {
                let position = plan.piece_sequences.len() as u32;
                plan.piece_sequences.push(index);
                plan.split_pieces.push(SplitPiece {
                    position,
                    offset: chunk * t_max,
                    length: t_max,
                });
                plan.spans.push(Span {
                    start: position,
                    end: position + 1,
                });
            }
        }
    }
}

/// The part of a sequence that the packers place: all of it, or for one longer than `t_max`, the
/// tail left after cutting full `t_max` chunks (0 when it divides exactly).
fn packed_part(length: u32, t_max: u32) -> u32 {
    if length > t_max {
        length % t_max
    } else {
        length
    }
}

/// Where a block's pieces lie in the plan's piece arrays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    start: u32,
    end: u32,
}

/// Brings the block count up to `target` at no cost in padding: padding is `blocks * t_max -
/// steps` whatever the blocks hold, so instead of adding empty blocks, blocks of several pieces
/// give their last piece a block of its own. Only when there are fewer pieces than blocks are
/// empty blocks added; returns how many.
fn split_blocks_to_reach(spans: &mut Vec<Span>, target: usize) -> u64 {
    loop {
        let mut split_any = false;
        // From the end: the last blocks packed hold the most (and shortest) pieces.
        for block in (0..spans.len()).rev() {
            if spans.len() == target {
                return 0;
            }
            let Span { start, end } = spans[block];
            if end - start >= 2 {
                spans[block].end = end - 1;
                spans.push(Span {
                    start: end - 1,
                    end,
                });
                split_any = true;
            }
        }
        if !split_any {
            break;
        }
    }
    let empty = (target - spans.len()) as u64;
    spans.resize(target, Span { start: 0, end: 0 });
    empty
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
    lengths: Arc<Vec<u32>>,
    /// The sequence of every piece, in packing order; blocks are spans of it.
    piece_sequences: Vec<u32>,
    /// The pieces of split sequences (split mode only), ascending by position.
    split_pieces: Vec<SplitPiece>,
    spans: Vec<Span>,
    stats: PlanStats,
}

impl EpochPlan {
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn options(&self) -> &Options {
        &self.options
    }

    pub fn stats(&self) -> &PlanStats {
        &self.stats
    }

    /// The lengths the plan was made from.
    pub fn lengths(&self) -> &[u32] {
        &self.lengths
    }

    pub fn num_blocks(&self) -> usize {
        self.spans.len()
    }

    /// The `position`-th block in epoch order (`position < num_blocks()`).
    pub fn block(&self, position: usize) -> Block<'_> {
        let span = self.spans[position];
        let range = span.start as usize..span.end as usize;
        // This block's split pieces, if any, start at the first entry at or after it.
        let first = self
            .split_pieces
            .partition_point(|split| split.position < span.start);
        Block {
            first_piece: span.start,
            sequences: &self.piece_sequences[range],
            split_pieces: &self.split_pieces[first..],
            lengths: &self.lengths,
            t_max: self.options.t_max,
        }
    }

    /// All blocks in epoch order.
    pub fn blocks(&self) -> impl ExactSizeIterator<Item = Block<'_>> + '_ {
        (0..self.spans.len()).map(|position| self.block(position))
    }

    /// Batches every rank runs this epoch (the same on every rank).
    pub fn batches_per_rank(&self) -> usize {
        self.spans.len() / self.options.blocks_per_global_batch() as usize
    }

    /// Batch `batch` of rank `rank`: exactly `blocks_per_batch` blocks.
    pub fn batch(&self, rank: u32, batch: usize) -> Result<Batch<'_>> {
        self.check_rank(rank)?;
        if batch >= self.batches_per_rank() {
            return Err(Error::invalid(
                "batch",
                batch,
                format!("a batch index below {}", self.batches_per_rank()),
            ));
        }
        let per_batch = self.options.blocks_per_batch as usize;
        let first = (batch * self.options.world_size as usize + rank as usize) * per_batch;
        Ok(Batch {
            plan: self,
            first_block: first,
        })
    }

    /// All batches of `rank`, in order.
    pub fn rank_batches(&self, rank: u32) -> Result<impl ExactSizeIterator<Item = Batch<'_>> + '_> {
        self.check_rank(rank)?;
        let per_batch = self.options.blocks_per_batch as usize;
        let stride = self.options.world_size as usize * per_batch;
        Ok((0..self.batches_per_rank()).map(move |batch| Batch {
            plan: self,
            first_block: batch * stride + rank as usize * per_batch,
        }))
    }

    fn check_rank(&self, rank: u32) -> Result<()> {
        if rank >= self.options.world_size {
            return Err(Error::invalid(
                "rank",
                rank,
                format!(
                    "a rank below world_size ({}), counting from 0",
                    self.options.world_size
                ),
            ));
        }
        Ok(())
    }

    /// A stable 64-bit fingerprint of the plan's content (block size, shards, every piece of
    /// every block in order), so ranks can check they computed the same plan. It is FNV-1a,
    /// fixed here, not `std`'s hasher, whose output may change between releases.
    pub fn hash(&self) -> u64 {
        let mut hash = StableHash::new();
        let o = &self.options;
        hash.add(u64::from(o.t_max));
        hash.add(u64::from(o.world_size));
        hash.add(u64::from(o.blocks_per_batch));
        hash.add(self.spans.len() as u64);
        for block in self.blocks() {
            hash.add(block.len() as u64);
            for piece in block.pieces() {
                hash.add(u64::from(piece.index) | u64::from(piece.offset) << 32);
                hash.add(u64::from(piece.length) | u64::from(piece.block_offset) << 32);
            }
        }
        hash.finish()
    }
}

struct StableHash(u64);

impl StableHash {
    fn new() -> Self {
        StableHash(0xcbf2_9ce4_8422_2325)
    }
    fn add(&mut self, word: u64) {
        for byte in word.to_le_bytes() {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// One block: its pieces in order; the rest of its `t_max` steps are padding.
#[derive(Debug, Clone, Copy)]
pub struct Block<'a> {
    first_piece: u32,
    sequences: &'a [u32],
    split_pieces: &'a [SplitPiece],
    /// Every sequence's length.
    lengths: &'a [u32],
    t_max: u32,
}

/// Where a piece of a split sequence lies in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SplitPiece {
    /// The piece's position in the plan's pieces.
    position: u32,
    offset: u32,
    length: u32,
}

impl<'a> Block<'a> {
    /// Number of pieces.
    pub fn len(&self) -> usize {
        self.sequences.len()
    }

    /// A block with no piece: all padding (only when a plan has more blocks than pieces).
    pub fn is_empty(&self) -> bool {
        self.sequences.is_empty()
    }

    pub fn t_max(&self) -> u32 {
        self.t_max
    }

    /// The block table: every piece with its sequence, offsets and length.
    pub fn pieces(&self) -> impl Iterator<Item = Piece> + 'a {
        let mut split_pieces = self.split_pieces.iter().peekable();
        let lengths = self.lengths;
        let mut block_offset = 0;
        (self.first_piece..)
            .zip(self.sequences)
            .map(move |(position, &index)| {
                let (offset, length) = match split_pieces.next_if(|s| s.position == position) {
                    Some(split) => (split.offset, split.length),
                    None => (0, lengths[index as usize]),
                };
                let piece = Piece {
                    index,
                    offset,
                    length,
                    block_offset,
                    continues: offset > 0,
                };
                block_offset += length;
                piece
            })
    }

    /// Real (non-padding) steps.
    pub fn used(&self) -> u32 {
        self.pieces().map(|piece| piece.length).sum()
    }

    pub fn padding(&self) -> u32 {
        self.t_max - self.used()
    }
}

/// One batch of one rank: `blocks_per_batch` consecutive blocks of the epoch order.
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    plan: &'a EpochPlan,
    first_block: usize,
}

impl<'a> Batch<'a> {
    pub fn blocks(&self) -> impl ExactSizeIterator<Item = Block<'a>> + 'a {
        let plan = self.plan;
        let count = plan.options.blocks_per_batch as usize;
        (self.first_block..self.first_block + count).map(move |position| plan.block(position))
    }

    pub fn t_max(&self) -> u32 {
        self.plan.options.t_max
    }

    /// The lengths the plan was made from.
    pub fn lengths(&self) -> &'a [u32] {
        self.plan.lengths()
    }
}
