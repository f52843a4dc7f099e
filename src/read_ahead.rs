//! Read-ahead from the plan (docs/read_ahead.md): what a batch reads of a sequence store, as byte
//! ranges of a field file, so that a loader can advise the kernel of them (`madvise` /
//! `posix_fadvise` with WILLNEED) batches before it reads them. Python's `bload.SequenceStore`
//! (through `torch.ops.bload.store_read_ranges`) and C++'s `bload::SequenceStore` (through the
//! bridge) both ask here; neither computes a range itself.

use crate::error::{Error, Result};
use crate::table::Column;

/// The loaders' default read-ahead: the batches after the one read whose reads start before
/// they are asked for. Measured, not guessed: benches/read_ahead.py's epochs gain nothing past it
/// (BENCHMARKS.md, "Read-ahead from the plan").
pub const READ_AHEAD: u64 = 4;
/// The most batches a loader reads ahead (each rides with every batch as its block table).
pub const MAX_READ_AHEAD: u64 = 1024;
/// An item pool's default window, a worker: the items it starts and its batches have not yet
/// taken are at most this many times its workers (docs/read_ahead.md, "Slow items"), so that a
/// slow item of 20x the rest is started a few batches ahead.
pub const ITEMS_PER_WORKER: u64 = 8;
/// The most workers (threads or processes) an item pool runs.
pub const MAX_POOL_WORKERS: u64 = 1024;

/// The byte ranges, as (start, length), of a field file of `step_bytes` bytes a step that the
/// pieces of a block table read: `table` is row-major [pieces, Column::COUNT] and `offsets` the
/// store's [count + 1] (sequence i is steps `offsets[i]..offsets[i + 1]`). Each range is widened
/// to whole pages of `page` bytes (the kernel takes advice a page at a time) and cut at
/// `file_bytes`; a range that overlaps or touches the one before it is merged into it. The ranges
/// keep the table's order, the order the batch reads its pieces in.
pub fn store_read_ranges(
    offsets: &[i64],
    step_bytes: u64,
    file_bytes: u64,
    table: &[i64],
    page: u64,
) -> Result<Vec<(u64, u64)>> {
    if !page.is_power_of_two() {
        return Err(Error::invalid(
            "page",
            page,
            "a power of two (the page size)",
        ));
    }
    if table.len() % Column::COUNT != 0 {
        let found = format!("{} cells", table.len());
        let expected = format!("whole rows of {} columns", Column::COUNT);
        return Err(Error::invalid("table", found, expected));
    }
    let count = offsets.len().saturating_sub(1);
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    for (row, cells) in table.chunks_exact(Column::COUNT).enumerate() {
        let cell = |column: Column| cells[column as usize];
        let (sequence, offset, length) = (
            cell(Column::Sequence),
            cell(Column::Offset),
            cell(Column::Length),
        );
        let Some(index) = usize::try_from(sequence).ok().filter(|&i| i < count) else {
            let expected = format!("a sequence from 0 to {} (the store's)", count as i64 - 1);
            return Err(Error::invalid(
                format!("table[{row}] sequence"),
                sequence,
                expected,
            ));
        };
        // Wide arithmetic: the offsets are the caller's (the operator takes any), so no sum or
        // product below may overflow, whatever they hold.
        let steps = i128::from(offsets[index + 1]) - i128::from(offsets[index]);
        let (offset, length) = (i128::from(offset), i128::from(length));
        if offset < 0 || length < 0 || offset + length > steps {
            let found = format!(
                "steps [{offset}, {}) of sequence {sequence}",
                offset + length
            );
            let expected = format!("a range within its {steps} steps");
            return Err(Error::invalid(format!("table[{row}]"), found, expected));
        }
        if length == 0 {
            continue;
        }
        let first = i128::from(offsets[index]) + offset;
        let bytes = |steps: i128| Some(u128::try_from(steps).ok()? * u128::from(step_bytes));
        let (Some(start), Some(end)) = (bytes(first), bytes(first + length)) else {
            let found = format!("sequence {sequence} at step {first}");
            let expected = "offsets from 0 (the store's)";
            return Err(Error::invalid(format!("table[{row}]"), found, expected));
        };
        let (Ok(start), Ok(end)) = (u64::try_from(start), u64::try_from(end)) else {
            let found = format!("bytes [{start}, {end})");
            return Err(Error::invalid(
                format!("table[{row}]"),
                found,
                "a range of 64 bits",
            ));
        };
        if end > file_bytes {
            let found = format!("bytes [{start}, {end})");
            let expected = format!("a range within the field file's {file_bytes} bytes");
            return Err(Error::invalid(format!("table[{row}]"), found, expected));
        }
        let start = start & !(page - 1);
        let end = end.div_ceil(page).saturating_mul(page).min(file_bytes);
        match ranges.last_mut() {
            Some((last_start, last_length))
                if start <= *last_start + *last_length && end >= *last_start =>
            {
                let merged_start = (*last_start).min(start);
                let merged_end = (*last_start + *last_length).max(end);
                *last_start = merged_start;
                *last_length = merged_end - merged_start;
            }
            _ => ranges.push((start, end - start)),
        }
    }
    Ok(ranges)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table of (sequence, offset, length) pieces, in blocks of their own.
    fn table(pieces: &[(i64, i64, i64)]) -> Vec<i64> {
        pieces
            .iter()
            .enumerate()
            .flat_map(|(block, &(sequence, offset, length))| {
                [block as i64, 0, length, sequence, offset, 0]
            })
            .collect()
    }

    // Sequences of 10, 30, 5 and 100 steps.
    const OFFSETS: [i64; 5] = [0, 10, 40, 45, 145];

    #[test]
    fn a_piece_reads_its_steps_widened_to_pages() {
        // 4 bytes a step, pages of 16 bytes: sequence 1's steps 2..7 are bytes 48..68, pages
        // 48..80.
        let ranges = store_read_ranges(&OFFSETS, 4, 580, &table(&[(1, 2, 5)]), 16).unwrap();
        assert_eq!(ranges, vec![(48, 32)]);
        // With pages of one byte, exactly the piece's bytes.
        let exact = store_read_ranges(&OFFSETS, 4, 580, &table(&[(1, 2, 5)]), 1).unwrap();
        assert_eq!(exact, vec![(48, 20)]);
    }

    #[test]
    fn ranges_keep_the_tables_order_and_merge_neighbours() {
        // Sequence 3 (bytes 180..580), then 0 (0..40), then 1 (40..160): 0 and 1 touch.
        let pieces = table(&[(3, 0, 100), (0, 0, 10), (1, 0, 30)]);
        let ranges = store_read_ranges(&OFFSETS, 4, 580, &pieces, 1).unwrap();
        assert_eq!(ranges, vec![(180, 400), (0, 160)]);
        // Pages of 64: sequence 3 is pages 128..580 (the file's end), 0 and 1 pages 0..192,
        // merged with nothing before them, as they come after.
        let paged = store_read_ranges(&OFFSETS, 4, 580, &pieces, 64).unwrap();
        assert_eq!(paged, vec![(128, 452), (0, 192)]);
        // Two pieces of the same page are one range.
        let same = store_read_ranges(&OFFSETS, 4, 580, &table(&[(0, 0, 2), (0, 5, 2)]), 64);
        assert_eq!(same.unwrap(), vec![(0, 64)]);
    }

    #[test]
    fn empty_pieces_and_tables_read_nothing() {
        assert!(store_read_ranges(&OFFSETS, 4, 580, &[], 16)
            .unwrap()
            .is_empty());
        let empty = store_read_ranges(&OFFSETS, 4, 580, &table(&[(2, 5, 0)]), 16).unwrap();
        assert!(empty.is_empty());
    }

    #[test]
    fn bad_pieces_are_refused_by_name() {
        let error = |pieces: &[(i64, i64, i64)]| {
            store_read_ranges(&OFFSETS, 4, 580, &table(pieces), 16)
                .unwrap_err()
                .to_string()
        };
        let unknown = error(&[(0, 0, 1), (4, 0, 1)]);
        assert!(unknown.contains("table[1] sequence = 4"), "{unknown}");
        assert!(error(&[(2, 3, 3)]).contains("within its 5 steps"));
        assert!(error(&[(2, -1, 1)]).contains("within its 5 steps"));
        let short_file = store_read_ranges(&OFFSETS, 4, 100, &table(&[(3, 0, 1)]), 16);
        assert!(short_file.unwrap_err().to_string().contains("100 bytes"));
        let ragged = store_read_ranges(&OFFSETS, 4, 580, &[0, 1, 2], 16);
        assert!(ragged.unwrap_err().to_string().contains("table = 3 cells"));
        // Offsets of no store: refused, never an overflow.
        let wild = [i64::MIN, i64::MAX];
        let far = store_read_ranges(&wild, u64::MAX, 580, &table(&[(0, i64::MAX, 1)]), 16);
        assert!(far.unwrap_err().to_string().contains("offsets from 0"));
        let huge = store_read_ranges(&[0, i64::MAX], u64::MAX, 580, &table(&[(0, 9, 1)]), 16);
        assert!(huge.unwrap_err().to_string().contains("a range of 64 bits"));
        let page = store_read_ranges(&OFFSETS, 4, 580, &[], 12);
        assert!(page.unwrap_err().to_string().contains("page = 12"));
    }
}
