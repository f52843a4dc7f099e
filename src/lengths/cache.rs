//! The binary lengths cache: lengths written as a 1-D `.npy` (version 1.0, little-endian), which
//! every reader of bload takes (`npy.rs` reads it back).
//!
//! The cache is written whole or not at all (`crate::output::write_whole`): a reader never
//! finds half a cache.

use super::npy::MAGIC;
use crate::error::{Error, Result};
use crate::output::write_whole;
use std::path::Path;

/// The dtype of a lengths cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NpyDtype {
    Int32,
    Int64,
}

/// Writes `lengths` to `path` as a `.npy` file of `dtype` (version 1.0, little-endian), whole
/// (`write_whole`; failures name `--out`).
pub fn write_npy(path: &Path, lengths: &[u32], dtype: NpyDtype) -> Result<()> {
    let (descr, size) = match dtype {
        NpyDtype::Int32 => ("<i4", 4),
        NpyDtype::Int64 => ("<i8", 8),
    };
    if dtype == NpyDtype::Int32 {
        if let Some(i) = lengths.iter().position(|&l| l > i32::MAX as u32) {
            return Err(Error::invalid(
                format!("lengths[{i}]"),
                lengths[i],
                "lengths below 2^31 for an int32 cache (write int64 instead)",
            ));
        }
    }
    let mut header = format!(
        "{{'descr': '{descr}', 'fortran_order': False, 'shape': ({},), }}",
        lengths.len()
    );
    // Padded so that the data starts at a multiple of 64 bytes, as NumPy aligns it.
    while (MAGIC.len() + 4 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let bytes = (MAGIC.len() + 4 + header.len()) as u64 + lengths.len() as u64 * size as u64;
    write_whole(path, "--out", bytes, |out| {
        out.write_all(MAGIC)?;
        out.write_all(&[1, 0])?;
        out.write_all(&(header.len() as u16).to_le_bytes())?;
        out.write_all(header.as_bytes())?;
        for &length in lengths {
            out.write_all(&u64::from(length).to_le_bytes()[..size])?;
        }
        Ok(())
    })
}
