//! What `Planner::new` checks and gathers from the lengths, so that planning an epoch cannot
//! fail and need not look at every length again.
//!
//! The checks and the gathering share one pass over the lengths (a dataset may hold millions):
//! the totals the checks need are the counts the packers need. Errors name the argument, its
//! value and what was expected, and come in a fixed order, so the first problem of an input is
//! the one reported.

use super::identities::packed_part;
use crate::alloc::{try_vec, try_with_capacity};
use crate::error::{Error, Result};
use crate::options::{Options, Oversize, Policy};
use crate::stats::{self, LowerBound};

/// Everything the planner keeps about valid lengths besides the lengths (see `Planner`'s fields).
#[derive(Debug)]
pub(super) struct Gathered {
    pub(super) counts: Vec<u32>,
    pub(super) class_starts: Vec<u32>,
    pub(super) oversized: Vec<u32>,
    pub(super) full_chunks: u64,
    pub(super) packing_bound: u64,
    pub(super) split_pieces: u64,
    pub(super) steps: u64,
    pub(super) longest: u32,
    pub(super) pieces: u64,
    pub(super) lower_bound: LowerBound,
}

/// Checks the lengths and options: an empty dataset, a zero length, sequences longer than
/// `t_max` (unless split), fewer pieces than the blocks of one global batch, or more pieces than
/// 32-bit positions reach are refused. The total of steps may be anything up to 2^64 - 1 (at
/// most 2^32 - 1 sequences of at most 2^32 - 1 steps make under 2^64): steps are summed in 64
/// bits, and nothing of a plan is addressed by step.
pub(super) fn gather(lengths: &[u32], options: &Options) -> Result<Gathered> {
    check_count(lengths.len(), options)?;
    let mut tally = Tally::new(options.t_max)?;
    for &length in lengths {
        tally.add(length);
    }
    tally.finish(lengths, options)
}

/// The checks that come before any length is read: the options, and the number of sequences.
pub(super) fn check_count(sequences: usize, options: &Options) -> Result<()> {
    options.validate()?;
    if sequences == 0 {
        return Err(Error::invalid(
            "lengths",
            "an empty list",
            "at least one sequence",
        ));
    }
    if sequences as u64 > u64::from(u32::MAX) {
        return Err(Error::invalid(
            "lengths",
            format!("{sequences} sequences"),
            format!("at most {} sequences (plans use 32-bit indices)", u32::MAX),
        ));
    }
    Ok(())
}

/// What the one pass over the lengths sums and counts, a length at a time (`add`), for the checks
/// and the packers: `gather` of lengths in memory, and `ingest.rs`'s, which narrows each length
/// from a caller's wider integers in the same pass.
pub(super) struct Tally {
    t_max: u32,
    counts: Vec<u32>,
    steps: u64,
    longest: u32,
    /// Sequences longer than t_max, their full chunks, and those with a tail after them.
    oversized_count: u32,
    full_chunks: u64,
    tails: u64,
}

impl Tally {
    /// An empty tally for blocks of `options.t_max` steps (valid options, `check_count`).
    pub(super) fn new(t_max: u32) -> Result<Self> {
        let counts = try_vec(
            "the count of sequences of each length",
            t_max as usize + 1,
            0u32,
        )?;
        Ok(Tally {
            t_max,
            counts,
            steps: 0,
            longest: 0,
            oversized_count: 0,
            full_chunks: 0,
            tails: 0,
        })
    }

    /// One more sequence. (At most `u32::MAX` of them, `check_count`: no count overflows.)
    #[inline(always)]
    pub(super) fn add(&mut self, length: u32) {
        let t_max = self.t_max;
        self.steps += u64::from(length);
        self.longest = self.longest.max(length);
        if length > t_max {
            self.oversized_count += 1;
            self.full_chunks += u64::from(length / t_max);
            self.tails += u64::from(length % t_max > 0);
        }
        self.counts[packed_part(length, t_max) as usize] += 1;
    }

    /// The checks and tables of the lengths tallied, which are `lengths`.
    pub(super) fn finish(self, lengths: &[u32], options: &Options) -> Result<Gathered> {
        let Tally {
            t_max,
            mut counts,
            steps,
            longest,
            oversized_count,
            full_chunks,
            tails,
        } = self;
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
        if options.policy == Policy::Lanes {
            // With none longer than t_max, `counts` is each length's count, which the deal's
            // sort would otherwise count again.
            let counts = if oversized_count == 0 {
                counts
            } else {
                Vec::new()
            };
            return lanes_gathered(lengths.len() as u64, steps, longest, counts, options);
        }
        if oversized_count > 0 && options.oversize == Oversize::Reject {
            return Err(Error::invalid(
                "t_max",
                t_max,
                format!(
                    "at least the longest sequence ({longest} steps): {oversized_count} sequences \
                     are longer than t_max; raise t_max, cut them into chunks (split=True in Python, \
                     --split on the command line, Options::split_oversized(true) in C++), or carry \
                     state across batches (policy lanes)"
                ),
            ));
        }
        let packed_parts: u64 = counts.iter().map(|&count| u64::from(count)).sum();
        let pieces = full_chunks + packed_parts;
        check_blocks_per_global_batch(pieces, options)?;
        check_piece_positions(pieces, options)?;

        // Counted first, so that the list is allocated at its size.
        let mut oversized = try_with_capacity("the sequences to split", oversized_count as usize)?;
        if oversized_count > 0 {
            let indices = (0u32..).zip(lengths).filter(|&(_, &length)| length > t_max);
            oversized.extend(indices.map(|(index, _)| index));
        }

        let mut class_starts = try_vec(
            "the start of each length in sorted order",
            t_max as usize + 2,
            0u32,
        )?;
        for length in 1..=t_max as usize {
            class_starts[length + 1] = class_starts[length] + counts[length];
        }

        let packing_bound = stats::packing_bound(&counts, options.piece_cap())?;
        let lower_bound = stats::lower_bound(packing_bound, full_chunks, steps, options);
        Ok(Gathered {
            counts,
            class_starts,
            oversized,
            full_chunks,
            split_pieces: full_chunks + tails,
            packing_bound,
            steps,
            longest,
            pieces,
            lower_bound,
        })
    }
}

/// What a `lanes` plan needs: no packing tables, as no sequence is packed or split into chunks,
/// but each length's count when there are `counts` (for the deal's sort); the lanes' own lower
/// bound.
fn lanes_gathered(
    sequences: u64,
    steps: u64,
    longest: u32,
    counts: Vec<u32>,
    options: &Options,
) -> Result<Gathered> {
    check_blocks_per_global_batch(sequences, options)?;
    let blocks = super::lanes::lanes_bound(steps, longest, options);
    if blocks > u64::from(u32::MAX) {
        return Err(super::lanes::too_many_blocks(blocks, options.t_max));
    }
    Ok(Gathered {
        counts,
        class_starts: Vec::new(),
        oversized: Vec::new(),
        full_chunks: 0,
        packing_bound: 0,
        split_pieces: 0,
        steps,
        longest,
        pieces: sequences,
        lower_bound: LowerBound {
            blocks_unrounded: blocks,
            blocks,
            padding: blocks * u64::from(options.t_max) - steps,
        },
    })
}

/// A plan stores a piece as its sequence and a block as a span of 32-bit piece positions, and
/// shuffles its blocks with 32-bit draws: at most `u32::MAX` pieces, and blocks (at most one per
/// piece, rounded up to whole global batches). Only split sequences cut into very many `t_max`
/// chunks, or nearly 2^32 sequences, come near it; the total of steps does not matter.
fn check_piece_positions(pieces: u64, options: &Options) -> Result<()> {
    let most_blocks = stats::round_up(pieces, options.blocks_per_global_batch());
    if most_blocks <= u64::from(u32::MAX) {
        return Ok(());
    }
    Err(Error::invalid(
        "pieces",
        pieces,
        format!(
            "at most {} pieces per epoch, rounded up to whole global batches of {} blocks \
             (plans use 32-bit piece positions): one per sequence, and one per t_max chunk of a \
             split sequence; raise t_max to cut fewer chunks",
            u32::MAX,
            options.blocks_per_global_batch()
        ),
    ))
}

/// Every block of a global batch (`world_size * blocks_per_batch` blocks) needs a piece: with
/// fewer pieces, whole batches would be padding, and an absurd `blocks_per_batch` would cost
/// its blocks' memory and time before anyone noticed. Checked here, before a plan allocates
/// its blocks.
/// Rounding up to whole global batches may still leave some blocks empty (counted in
/// `empty_blocks`), never a global batch of them.
fn check_blocks_per_global_batch(pieces: u64, options: &Options) -> Result<()> {
    let blocks = options.blocks_per_global_batch();
    if pieces >= blocks {
        return Ok(());
    }
    let (world_size, per_batch) = (options.world_size, options.blocks_per_batch);
    // With one block per batch the product is the world size: name the option the user set.
    let (argument, value, lower) = if per_batch == 1 {
        ("world_size", world_size.to_string(), "world_size")
    } else {
        (
            "world_size * blocks_per_batch",
            format!("{blocks} ({world_size} x {per_batch})"),
            "blocks_per_batch or world_size",
        )
    };
    Err(Error::invalid(
        argument,
        value,
        format!(
            "at most {pieces}: each block of a global batch needs a piece, and the lengths give \
             only {pieces} (one per sequence, or per chunk of a split sequence); lower {lower}"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::MAX_T_MAX;

    fn split_options(t_max: u32) -> Options {
        let mut options = Options::new(t_max);
        options.oversize = Oversize::Split;
        options
    }

    #[test]
    fn counts_packed_parts_and_starts_each_length_class_after_the_shorter_ones() {
        let gathered = gather(&[3, 1, 3, 5, 4], &Options::new(5)).unwrap();
        assert_eq!(gathered.counts, [0, 1, 0, 2, 1, 1]);
        // class_starts[len]: sequences with a packed part shorter than len.
        assert_eq!(gathered.class_starts, [0, 0, 1, 1, 3, 4, 5]);
        assert!(gathered.oversized.is_empty());
        assert_eq!((gathered.steps, gathered.pieces), (16, 5));
        assert_eq!(gathered.split_pieces, 0);
    }

    #[test]
    fn split_sequences_count_their_chunks_and_tails() {
        // 25 = 2 chunks + tail 5; 30 = 3 chunks, no tail; 12 = 1 chunk + tail 2.
        let gathered = gather(&[25, 4, 30, 12], &split_options(10)).unwrap();
        assert_eq!(gathered.oversized, [0, 2, 3]);
        // The tail-less sequence adds nothing to count 0.
        assert_eq!(gathered.counts, [0, 0, 1, 0, 1, 1, 0, 0, 0, 0, 0]);
        assert_eq!(gathered.split_pieces, 6 + 2);
        // 6 full chunks and 3 packed parts.
        assert_eq!(gathered.pieces, 9);
        assert_eq!(gathered.steps, 71);
        assert_eq!(*gathered.class_starts.last().unwrap(), 3);
    }

    #[test]
    fn the_first_problem_of_an_input_is_the_one_named() {
        // A zero length is named before the oversized sequence.
        let err = gather(&[40, 0], &Options::new(10)).unwrap_err();
        assert_eq!(err.argument, "lengths[1]");
        // Bad options come before bad lengths.
        let err = gather(&[], &Options::new(0)).unwrap_err();
        assert_eq!(err.argument, "t_max");
        // An exact multiple of t_max has no tail but is no zero-length sequence.
        assert!(gather(&[20], &split_options(10)).is_ok());
        let err = gather(&[20], &Options::new(10)).unwrap_err();
        assert_eq!(err.argument, "t_max");
    }

    #[test]
    fn the_blocks_of_a_global_batch_may_not_outnumber_pieces() {
        // 3 pieces; 2 ranks x 2 blocks per batch need 4.
        let mut options = Options::new(10);
        options.world_size = 2;
        options.blocks_per_batch = 2;
        let err = gather(&[6, 7, 8], &options).unwrap_err();
        assert_eq!(err.argument, "world_size * blocks_per_batch");
        assert_eq!(err.value, "4 (2 x 2)");
        assert!(err.expected.starts_with("at most 3: each block"), "{err}");
        assert!(err
            .expected
            .ends_with("lower blocks_per_batch or world_size"));
        // 2^28 blocks per batch for 3 pieces (batches of 7 * 2^28 steps pass the int32 check):
        // refused before a plan allocates a block.
        options.t_max = 7;
        options.blocks_per_batch = 1 << 28;
        let err = gather(&[6, 7, 5], &options).unwrap_err();
        assert_eq!(err.value, "536870912 (2 x 268435456)");
        options.blocks_per_batch = 1;
        options.world_size = 3;
        assert_eq!(gather(&[6, 7, 5], &options).unwrap().pieces, 3);
    }

    #[test]
    fn totals_past_32_bits_are_planned_and_pieces_past_32_bits_refused() {
        // 2^32 steps: once refused, now an epoch like any other.
        let mut options = split_options(MAX_T_MAX);
        let gathered = gather(&[u32::MAX, 1], &options).unwrap();
        assert_eq!(gathered.steps, 1 << 32);
        // Two sequences of 2^32 - 1 steps in chunks of 1 step: 2^33 - 2 pieces.
        options.t_max = 1;
        let err = gather(&[u32::MAX, u32::MAX], &options).unwrap_err();
        assert_eq!(err.argument, "pieces");
        assert_eq!(err.value, (2 * u64::from(u32::MAX)).to_string());
        assert!(
            err.expected.starts_with("at most 4294967295 pieces"),
            "{err}"
        );
        // The rounding to whole global batches counts: u32::MAX pieces fit, unless rounded up.
        assert!(check_piece_positions(u64::from(u32::MAX), &options).is_ok());
        options.world_size = 2;
        let err = check_piece_positions(u64::from(u32::MAX), &options).unwrap_err();
        assert!(err.expected.contains("global batches of 2 blocks"), "{err}");
    }

    #[test]
    fn ranks_may_not_outnumber_pieces() {
        let mut options = split_options(10);
        options.world_size = 4;
        // 20 makes 2 chunks and 5 stays whole: 3 pieces for 4 ranks.
        let err = gather(&[20, 5], &options).unwrap_err();
        assert_eq!(
            (err.argument.as_str(), err.value.as_str()),
            ("world_size", "4")
        );
        assert!(err.expected.starts_with("at most 3:"), "{err}");
        options.world_size = 3;
        assert_eq!(gather(&[20, 5], &options).unwrap().pieces, 3);
    }
}
