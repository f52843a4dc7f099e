//! The Megatron `.idx` lengths format: the index beside a Megatron-LM / Megatron-Core `.bin` of
//! tokens (`MMapIndexedDataset`, `IndexedDataset` in megatron.core), whose header carries each
//! sequence's length, so the tokens are never read.
//!
//! Layout (little-endian): the magic `MMIDIDX\x00\x00`, the version (u64, 1), the tokens' dtype
//! code (u8, 1 to 8), the sequence count (u64), the document count (u64), then the sequences'
//! lengths (int32 each), their byte offsets in the `.bin` (int64 each) and the documents' first
//! sequences (int64 each); newer files may append a mode byte per sequence. The file must be
//! as long as the counts say, so a truncated index is refused rather than read as a short one;
//! it may be longer (the mode bytes, or whatever a later version appends), so bytes past the
//! document index are not read. The arrays must agree with the counts: the pointers are the
//! running byte offsets of the lengths (times the dtype's size), and the document index starts
//! at 0, never decreases and ends at the sequence count. A count lower than the lengths written
//! would otherwise read as fewer sequences; the pointers that follow catch it.

use super::{grow, length, read_elements, room_for, truncated, Input};
use crate::error::{Error, Result};
use std::io::Read;
use std::path::Path;

pub(super) const MAGIC: &[u8] = b"MMIDIDX\x00\x00";
const FORMAT: &str = "Megatron .idx";
const VERSION: u64 = 1;
const HEADER: u64 = 9 + 8 + 1 + 8 + 8;

/// Bytes of one token of each dtype code (Megatron's `DType`: uint8, int8, int16, int32, int64,
/// float64, float32, uint16), which the pointers count in.
const TOKEN_BYTES: [u64; 8] = [1, 1, 2, 4, 8, 8, 4, 2];

/// Reads the sequence lengths of a Megatron `.idx` file (see the module doc).
pub(super) fn read_idx(input: Input) -> Result<Vec<u32>> {
    let Input {
        path,
        size,
        mut reader,
    } = input;
    let mut header = [0u8; HEADER as usize];
    let expected = "a Megatron .idx file: MMIDIDX\\x00\\x00, version 1 (u64), a dtype code (u8), \
                    the sequence and document counts (u64), then the int32 lengths";
    reader
        .read_exact(&mut header)
        .map_err(|err| truncated(path, FORMAT, &err, expected))?;
    let bad =
        |value: String, expected: &str| Error::invalid(path.display().to_string(), value, expected);
    if &header[..9] != MAGIC {
        return Err(bad("a file without the MMIDIDX magic".into(), expected));
    }
    let word = |at: usize| {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&header[at..at + 8]);
        u64::from_le_bytes(bytes)
    };
    let version = word(9);
    if version != VERSION {
        return Err(bad(
            format!("a Megatron .idx of version {version}"),
            "a Megatron .idx of version 1",
        ));
    }
    let code = header[17];
    if !(1..=8).contains(&code) {
        return Err(bad(
            format!("dtype code {code}"),
            "a Megatron .idx whose dtype code is from 1 to 8",
        ));
    }
    let (sequences, documents) = (word(18), word(26));
    // int32 lengths, int64 pointers and int64 document indices.
    let needed = sequences
        .checked_mul(12)
        .and_then(|bytes| bytes.checked_add(documents.checked_mul(8)?))
        .and_then(|bytes| bytes.checked_add(HEADER));
    let expected = format!(
        "a Megatron .idx of {sequences} sequences and {documents} documents, at least {} bytes",
        needed.map_or_else(|| "2^64".to_string(), |n| n.to_string())
    );
    let fits = |size: u64| needed.is_some_and(|needed| size >= needed);
    match size {
        Some(size) if !fits(size) => {
            return Err(bad(format!("a truncated file of {size} bytes"), &expected));
        }
        // A stream's size is unknown, but no stream holds more than 2^64 bytes either.
        None if needed.is_none() => {
            return Err(bad("a truncated file".into(), &expected));
        }
        _ => {}
    }
    let count = usize::try_from(sequences).unwrap_or(usize::MAX);
    let mut lengths = room_for(path, size, count)?;
    let eof = |err: &std::io::Error| truncated(path, FORMAT, err, &expected);
    read_elements(
        &mut reader,
        count,
        4,
        |first, bytes| {
            grow(&mut lengths, path, bytes.len() / 4)?;
            for (i, element) in bytes.chunks_exact(4).enumerate() {
                let value = i32::from_le_bytes([element[0], element[1], element[2], element[3]]);
                lengths.push(length(path, first + i, value.into())?);
            }
            Ok(())
        },
        eof,
    )?;
    check_pointers(
        path,
        &mut reader,
        &lengths,
        TOKEN_BYTES[usize::from(code - 1)],
        eof,
    )?;
    check_documents(path, &mut reader, documents, sequences, eof)?;
    Ok(lengths)
}

/// The `index`-th int64 of one of the file's arrays, from a chunk of them.
fn int64(bytes: &[u8], i: usize) -> i64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[8 * i..8 * i + 8]);
    i64::from_le_bytes(word)
}

/// The pointers must be the running byte offsets of the sequences in the `.bin`: a count that
/// disagrees with the lengths written (a count too low reads the lengths short, and the next
/// array as pointers) is refused here rather than read as fewer sequences.
fn check_pointers(
    path: &Path,
    reader: &mut impl Read,
    lengths: &[u32],
    token_bytes: u64,
    eof: impl Fn(&std::io::Error) -> Error,
) -> Result<()> {
    let mut offset: u64 = 0;
    read_elements(
        reader,
        lengths.len(),
        8,
        |first, bytes| {
            for i in 0..bytes.len() / 8 {
                let pointer = int64(bytes, i);
                if u64::try_from(pointer) != Ok(offset) {
                    return Err(inconsistent(
                        path,
                        format!("pointers[{}]", first + i),
                        pointer,
                        format!(
                            "{offset}, the sum of the lengths before it times {token_bytes} \
                             bytes a token (the sequence count and the lengths agree)"
                        ),
                    ));
                }
                // Saturated, a sum no pointer can equal: the next one is refused.
                offset = offset.saturating_add(u64::from(lengths[first + i]) * token_bytes);
            }
            Ok(())
        },
        eof,
    )
}

/// The document index must start at 0, never decrease and end at the sequence count.
fn check_documents(
    path: &Path,
    reader: &mut impl Read,
    documents: u64,
    sequences: u64,
    eof: impl Fn(&std::io::Error) -> Error,
) -> Result<()> {
    if documents == 0 {
        return Err(inconsistent(
            path,
            "document count".into(),
            0,
            "at least 1: the document index starts with 0".into(),
        ));
    }
    let count = usize::try_from(documents).unwrap_or(usize::MAX);
    let mut previous: i64 = 0;
    read_elements(
        reader,
        count,
        8,
        |first, bytes| {
            for i in 0..bytes.len() / 8 {
                let (index, value) = (first + i, int64(bytes, i));
                let at_most = u64::try_from(value).is_ok_and(|value| value <= sequences);
                let expected = if index == 0 && value != 0 {
                    Some("0, the first document's first sequence".to_string())
                } else if index + 1 == count && u64::try_from(value) != Ok(sequences) {
                    Some(format!("{sequences}, the sequence count, last"))
                } else if value < previous || !at_most {
                    Some(format!(
                        "from {previous} to {sequences}: the index never decreases"
                    ))
                } else {
                    None
                };
                if let Some(expected) = expected {
                    return Err(inconsistent(
                        path,
                        format!("document index[{index}]"),
                        value,
                        expected,
                    ));
                }
                previous = value;
            }
            Ok(())
        },
        eof,
    )
}

/// An error about `field` of the file at `path`, which disagrees with the rest of the file.
fn inconsistent(path: &Path, field: String, value: i64, expected: String) -> Error {
    Error::invalid(format!("{} ({field})", path.display()), value, expected)
}
