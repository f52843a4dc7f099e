//! The shared plan file: the one definition of its bytes (docs/shared_plans.md describes them).
//!
//! All integers little-endian. A fixed header of [`FIXED_HEADER`] bytes, the options as the
//! core's JSON (zero-padded to 8 bytes), then four columns, each starting 8-aligned and
//! zero-padded to 8 bytes: the lengths (`u32` each), every piece's sequence (`u32`), the pieces of
//! split sequences (`position, offset, length`: three `u32`), and the blocks (`start, end`: two
//! `u32`, spans of the pieces, in epoch order). The header's checksum covers the header (its own
//! four bytes taken as zero); each column has a checksum of its own.

use super::column::{Column, Plain};
use super::mapping::Mapping;
use super::refused;
use crate::error::{Error, Result};
use crate::options::Options;
use crate::plan::resume::Origin;
use crate::plan::EpochPlan;
use crate::stats::PlanStats;
use crate::store::crc32;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, OnceLock};

pub(super) const MAGIC: &[u8; 8] = b"BLOADPLN";
/// The format's version; a file of another version is refused.
pub const SHARED_PLAN_VERSION: u32 = 1;
/// Bytes before the options' JSON.
pub(super) const FIXED_HEADER: usize = 232;
const HEADER_CRC_AT: usize = 212;
const COLUMNS: usize = 4;
const COLUMN_NAMES: [&str; COLUMNS] = ["lengths", "piece sequences", "split pieces", "blocks"];

/// What the header says: the identity a reader checks, and where the columns lie.
pub(super) struct Header {
    pub(super) version: u32,
    pub(super) epoch: u64,
    pub(super) lengths_hash: u64,
    pub(super) options: Options,
    origin: (u64, u64),
    /// The plan's counts, as [`PlanStats::counts`] lists them.
    counts: [u64; 13],
    blocks_unrounded: u64,
    column_lens: [u64; COLUMNS],
    column_crcs: [u32; COLUMNS],
    header_bytes: usize,
}

fn column_bytes<T: Plain>(column: &[T]) -> &[u8] {
    // SAFETY: `T: Plain` has no padding, so every byte of the slice is initialised.
    unsafe { std::slice::from_raw_parts(column.as_ptr().cast(), std::mem::size_of_val(column)) }
}

fn padding_to_8(len: usize) -> usize {
    len.next_multiple_of(8) - len
}

/// Writes `plan` (made from lengths of `lengths_hash`) to `out` in the format above.
pub(super) fn write(plan: &EpochPlan, lengths_hash: u64, out: &mut impl Write) -> Result<()> {
    let stats = &plan.stats;
    // The counts in `PlanStats::counts`'s order, then the lower bound before rounding.
    let counts = stats.counts().map(|(_, count)| count);
    let blocks_unrounded = [stats.lower_bound.blocks_unrounded];
    let columns: [&[u8]; COLUMNS] = [
        column_bytes(&plan.lengths),
        column_bytes(&plan.piece_sequences),
        column_bytes(&plan.split_pieces),
        column_bytes(&plan.spans),
    ];
    let lens = [
        plan.lengths.len(),
        plan.piece_sequences.len(),
        plan.split_pieces.len(),
        plan.spans.len(),
    ];
    let options = plan.options.to_json();
    let header_bytes = FIXED_HEADER + options.len() + padding_to_8(options.len());
    let mut header = Vec::new();
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&SHARED_PLAN_VERSION.to_le_bytes());
    header.extend_from_slice(&(header_bytes as u32).to_le_bytes());
    let words = [
        plan.epoch,
        lengths_hash,
        stable_text_hash(&options),
        plan.hash(),
    ];
    let origin = [
        u64::from(plan.origin.planned_world_size),
        plan.origin.first_block,
    ];
    for word in words
        .iter()
        .chain(&origin)
        .chain(&counts)
        .chain(&blocks_unrounded)
    {
        header.extend_from_slice(&word.to_le_bytes());
    }
    for len in lens {
        header.extend_from_slice(&(len as u64).to_le_bytes());
    }
    // At 208: the first column's checksum, the header's, then the other three columns'.
    let crcs = columns.map(crc32);
    header.extend_from_slice(&crcs[0].to_le_bytes());
    header.extend_from_slice(&0u32.to_le_bytes()); // the header's checksum, below
    header.extend_from_slice(&crcs[1].to_le_bytes());
    header.extend_from_slice(&crcs[2].to_le_bytes());
    header.extend_from_slice(&crcs[3].to_le_bytes());
    header.extend_from_slice(&(options.len() as u32).to_le_bytes());
    debug_assert_eq!(header.len(), FIXED_HEADER);
    header.extend_from_slice(options.as_bytes());
    header.resize(header_bytes, 0);
    let crc = crc32(&header);
    header[HEADER_CRC_AT..HEADER_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    let io = |err: std::io::Error| Error::invalid("shared plan file", err, "a writable file");
    out.write_all(&header).map_err(io)?;
    for column in columns {
        out.write_all(column).map_err(io)?;
        out.write_all(&[0; 8][..padding_to_8(column.len())])
            .map_err(io)?;
    }
    Ok(())
}

/// The options' JSON's stable hash, in the file's name and header.
pub(super) fn stable_text_hash(text: &str) -> u64 {
    let words: Vec<u64> = text.bytes().map(u64::from).collect();
    crate::plan::stable_hash(&words)
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or_default())
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or_default())
}

/// The header of the mapped file at `path`, its magic, version, size and checksum checked.
pub(super) fn read_header(bytes: &[u8], path: &Path) -> Result<Header> {
    let no_plan = "a plan file written by bload (shared_plan_dir)";
    if bytes.len() < FIXED_HEADER || &bytes[..8] != MAGIC {
        let start = String::from_utf8_lossy(&bytes[..bytes.len().min(8)]).into_owned();
        return Err(refused(
            path,
            "magic",
            format!("{start:?}, {} bytes", bytes.len()),
            no_plan,
        ));
    }
    let version = u32_at(bytes, 8);
    if version != SHARED_PLAN_VERSION {
        let expected = format!("version {SHARED_PLAN_VERSION}, this bload's");
        return Err(refused(path, "version", version, expected));
    }
    let header_bytes = u32_at(bytes, 12) as usize;
    let options_len = u32_at(bytes, FIXED_HEADER - 4) as usize;
    if header_bytes != FIXED_HEADER + options_len + padding_to_8(options_len)
        || header_bytes > bytes.len()
    {
        return Err(refused(
            path,
            "header size",
            header_bytes,
            "the header's size, within the file",
        ));
    }
    let mut header = bytes[..header_bytes].to_vec();
    header[HEADER_CRC_AT..HEADER_CRC_AT + 4].fill(0);
    let stored = u32_at(bytes, HEADER_CRC_AT);
    if crc32(&header) != stored {
        return Err(refused(
            path,
            "header checksum",
            format!("{stored:#010x}"),
            format!(
                "{:#010x}, the header's (the file is damaged)",
                crc32(&header)
            ),
        ));
    }
    let text =
        std::str::from_utf8(&bytes[FIXED_HEADER..FIXED_HEADER + options_len]).map_err(|_| {
            refused(
                path,
                "options",
                "bytes that are not UTF-8",
                "the options' JSON",
            )
        })?;
    let options = Options::from_json(text)
        .map_err(|err| refused(path, "options", err, "options saved by bload"))?;
    let word = |index: usize| u64_at(bytes, 16 + 8 * index);
    let mut counts = [0; 13];
    for (index, count) in counts.iter_mut().enumerate() {
        *count = word(6 + index);
    }
    Ok(Header {
        version,
        epoch: word(0),
        lengths_hash: word(1),
        options,
        origin: (word(4), word(5)),
        counts,
        blocks_unrounded: word(19),
        column_lens: [word(20), word(21), word(22), word(23)],
        column_crcs: [
            u32_at(bytes, 208),
            u32_at(bytes, 216),
            u32_at(bytes, 220),
            u32_at(bytes, 224),
        ],
        header_bytes,
    })
}

/// The plan in the mapped file at `path`, whose header is `header`: the columns' extents and
/// checksums checked, and every block and piece within range, so that reading it cannot go out
/// of bounds.
pub(super) fn plan_of(map: &Arc<Mapping>, header: Header, path: &Path) -> Result<EpochPlan> {
    debug_assert_eq!(header.version, SHARED_PLAN_VERSION);
    let sizes = [4usize, 4, 12, 8];
    let mut offsets = [0usize; COLUMNS];
    // The size the header promises, checked arithmetic: a damaged count is no overflow.
    let mut end = Some(header.header_bytes);
    for column in 0..COLUMNS {
        offsets[column] = end.unwrap_or(0);
        let bytes = usize::try_from(header.column_lens[column])
            .ok()
            .and_then(|len| len.checked_mul(sizes[column]))
            .and_then(|bytes| bytes.checked_add(padding_to_8(bytes)));
        end = end.zip(bytes).and_then(|(at, bytes)| at.checked_add(bytes));
    }
    if end != Some(map.len()) {
        let promised = end.map_or_else(|| "more than 2^64".to_string(), |end| end.to_string());
        return Err(refused(
            path,
            "size",
            format!("{} bytes", map.len()),
            format!("{promised} bytes, what its header says"),
        ));
    }
    let bytes = map.bytes();
    for column in 0..COLUMNS {
        let len = header.column_lens[column] as usize * sizes[column];
        let crc = crc32(&bytes[offsets[column]..offsets[column] + len]);
        if crc != header.column_crcs[column] {
            let field = format!("checksum of the {}", COLUMN_NAMES[column]);
            let expected = format!(
                "{:#010x}, the header's (the file is damaged)",
                header.column_crcs[column]
            );
            return Err(refused(path, &field, format!("{crc:#010x}"), expected));
        }
    }
    let len = |column: usize| header.column_lens[column] as usize;
    let plan = EpochPlan {
        epoch: header.epoch,
        options: header.options,
        lengths: Column::mapped(map, offsets[0], len(0)),
        piece_sequences: Column::mapped(map, offsets[1], len(1)),
        split_pieces: Column::mapped(map, offsets[2], len(2)),
        spans: Column::mapped(map, offsets[3], len(3)),
        stats: PlanStats::from_counts(header.counts, header.blocks_unrounded),
        measured: OnceLock::new(),
        origin: Origin {
            planned_world_size: u32::try_from(header.origin.0).unwrap_or(0),
            first_block: header.origin.1,
        },
    };
    super::ranges::check(&plan, path)?;
    Ok(plan)
}
