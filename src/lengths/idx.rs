//! The Megatron `.idx` lengths format: the index beside a Megatron-LM / Megatron-Core `.bin` of
//! tokens (`MMapIndexedDataset`, `IndexedDataset` in megatron.core), whose header carries each
//! sequence's length, so the tokens are never read.
//!
//! Layout (little-endian): the magic `MMIDIDX\x00\x00`, the version (u64, 1), the tokens' dtype
//! code (u8, 1 to 8), the sequence count (u64), the document count (u64), then the sequences'
//! lengths (int32 each), their byte offsets in the `.bin` (int64 each) and the documents' first
//! sequences (int64 each); newer files may append a mode byte per sequence. The file must be
//! as long as the counts say, so a truncated index is refused rather than read as a short one.

use super::{length, open, read_elements, truncated};
use crate::alloc::try_with_capacity;
use crate::error::{Error, Result};
use std::io::{BufReader, Read};
use std::path::Path;

pub(super) const MAGIC: &[u8] = b"MMIDIDX\x00\x00";
const FORMAT: &str = "Megatron .idx";
const VERSION: u64 = 1;
const HEADER: u64 = 9 + 8 + 1 + 8 + 8;

/// Reads the sequence lengths of a Megatron `.idx` file (see the module doc).
pub(super) fn read_idx(path: &Path) -> Result<Vec<u32>> {
    let file = open(path, FORMAT)?;
    let size = file
        .metadata()
        .map_err(|err| super::unreadable(path, FORMAT, &err))?
        .len();
    let mut reader = BufReader::new(file);
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
    if needed.is_none_or(|needed| size < needed) {
        return Err(bad(format!("a truncated file of {size} bytes"), &expected));
    }
    let count = usize::try_from(sequences).unwrap_or(usize::MAX);
    let mut lengths = try_with_capacity(&format!("the lengths of {}", path.display()), count)?;
    read_elements(
        &mut reader,
        count,
        4,
        |first, bytes| {
            for (i, element) in bytes.chunks_exact(4).enumerate() {
                let value = i32::from_le_bytes([element[0], element[1], element[2], element[3]]);
                lengths.push(length(path, first + i, value.into())?);
            }
            Ok(())
        },
        |err| truncated(path, FORMAT, err, &expected),
    )?;
    Ok(lengths)
}
