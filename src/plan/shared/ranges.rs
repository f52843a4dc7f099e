//! The checks of a mapped plan that keep reading it in bounds: a file that passed its checksums
//! but was not written by bload must be refused, not make a reader panic or serve nonsense.

use crate::error::Result;
use crate::options::Oversize;
use crate::plan::EpochPlan;
use std::path::Path;

/// Every index the plan's readers follow lies in range, and the counts the serving path
/// divides by or sums agree with the columns (a file that passed its checksums but was not
/// written by bload must not make a reader panic).
pub(super) fn check(plan: &EpochPlan, path: &Path) -> Result<()> {
    let options = &plan.options;
    let pieces = plan.piece_sequences.len();
    if plan.spans.len() as u64 % options.blocks_per_global_batch() != 0
        || u32::try_from(pieces).is_err()
    {
        let expected = "whole global batches of blocks, and at most 2^32 - 1 pieces";
        return Err(super::refused(path, "blocks", plan.spans.len(), expected));
    }
    if let Some(span) = plan
        .spans
        .iter()
        .find(|span| span.start > span.end || span.end as usize > pieces)
    {
        let value = format!("{}..{}", span.start, span.end);
        return Err(super::refused(
            path,
            "blocks",
            value,
            format!("spans of the {pieces} pieces"),
        ));
    }
    let sequences = plan.lengths.len();
    if let Some(&index) = plan
        .piece_sequences
        .iter()
        .find(|&&index| index as usize >= sequences)
    {
        return Err(super::refused(
            path,
            "piece sequences",
            index,
            format!("a sequence below {sequences}"),
        ));
    }
    let t_max = options.t_max;
    if let Some(&length) = plan
        .lengths
        .iter()
        .find(|&&length| length == 0 || (length > t_max && options.oversize != Oversize::Split))
    {
        return Err(super::refused(
            path,
            "lengths",
            length,
            format!("lengths from 1 to t_max ({t_max}), or longer if split"),
        ));
    }
    let mut previous = None;
    for split in plan.split_pieces.iter() {
        let in_order = previous.is_none_or(|previous| previous < split.position);
        let whole = plan
            .piece_sequences
            .get(split.position as usize)
            .map(|&index| plan.lengths[index as usize]);
        let fits = whole.is_some_and(|whole| {
            u64::from(split.offset) + u64::from(split.length) <= u64::from(whole)
                && split.length <= t_max
        });
        if !in_order || !fits {
            let value = format!(
                "position {}, offset {}, length {}",
                split.position, split.offset, split.length
            );
            return Err(super::refused(
                path,
                "split pieces",
                value,
                "ascending positions of pieces inside their sequences",
            ));
        }
        previous = Some(split.position);
    }
    // Every block's pieces fit its t_max steps (a block's padding is t_max less them).
    let splits = &plan.split_pieces;
    for span in plan.spans.iter() {
        let mut next_split = splits.partition_point(|split| split.position < span.start);
        let mut used = 0u64;
        for position in span.start..span.end {
            let length = match splits.get(next_split) {
                Some(split) if split.position == position => {
                    next_split += 1;
                    split.length
                }
                _ => plan.lengths[plan.piece_sequences[position as usize] as usize],
            };
            used += u64::from(length);
        }
        if used > u64::from(t_max) {
            let value = format!("{}..{} holding {used} steps", span.start, span.end);
            return Err(super::refused(
                path,
                "blocks",
                value,
                format!("blocks of at most t_max ({t_max}) steps"),
            ));
        }
    }
    Ok(())
}
