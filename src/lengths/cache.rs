//! The binary lengths cache: lengths written as a 1-D `.npy` (version 1.0, little-endian), which
//! every reader of bload takes (`npy.rs` reads it back).
//!
//! The cache is written to a temporary file beside the output and renamed over it at the end, so
//! that a reader never finds half a cache. A rename replaces whatever has the name, so an output
//! that exists must be a regular file: a device, a FIFO or a directory there is refused, never
//! replaced by a file. Failures name the path the user gave, not the temporary one.

use super::npy::MAGIC;
use crate::error::{Error, Result};
use std::io::{ErrorKind, Write};
use std::path::Path;

/// The dtype of a lengths cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NpyDtype {
    Int32,
    Int64,
}

/// Writes `lengths` to `path` as a `.npy` file of `dtype` (version 1.0, little-endian), through
/// a temporary file beside it renamed at the end, so that a reader never finds half a cache.
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
    check_output(path)?;
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
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp{}", std::process::id()));
    let temporary = path.with_file_name(name);
    let write = || -> std::io::Result<()> {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&temporary)?);
        out.write_all(MAGIC)?;
        out.write_all(&[1, 0])?;
        out.write_all(&(header.len() as u16).to_le_bytes())?;
        out.write_all(header.as_bytes())?;
        for &length in lengths {
            out.write_all(&u64::from(length).to_le_bytes()[..size])?;
        }
        out.into_inner()
            .map_err(|err| err.into_error())?
            .sync_all()?;
        std::fs::rename(&temporary, path)
    };
    write().map_err(|err| {
        let _ = std::fs::remove_file(&temporary);
        failed(path, bytes, &err)
    })
}

/// An output that exists must be a regular file: the rename at the end would replace anything
/// else (a device node, a FIFO) with a file, or fail on a directory after all the writing.
fn check_output(path: &Path) -> Result<()> {
    // Through a link, to what it names: a link to a device is a device to the user.
    let Ok(metadata) = std::fs::metadata(path) else {
        // A new file (or one out of reach, which the write then names).
        return Ok(());
    };
    if metadata.is_file() {
        return Ok(());
    }
    let what = kind_of(&metadata.file_type());
    Err(Error::invalid(
        "--out",
        format!("{} ({what})", path.display()),
        "a regular file to replace, or the path of a new one",
    ))
}

/// What a file that is not a regular file is, in words.
fn kind_of(file_type: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_char_device() {
            return "a character device";
        }
        if file_type.is_block_device() {
            return "a block device";
        }
        if file_type.is_fifo() {
            return "a FIFO";
        }
        if file_type.is_socket() {
            return "a socket";
        }
    }
    if file_type.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

/// The error of a write of `bytes` to `path` (through its temporary file) that failed with
/// `err`: it names the path the user gave, and says plainly what a full disk or a missing
/// directory is.
fn failed(path: &Path, bytes: u64, err: &std::io::Error) -> Error {
    let (why, expected) = match err.kind() {
        ErrorKind::StorageFull => (
            "no space left on its device".to_string(),
            format!("room for the cache's {bytes} bytes on its file system"),
        ),
        ErrorKind::NotFound => {
            let parent = match path.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => parent,
                _ => Path::new("."),
            };
            (
                format!("no such directory: {}", parent.display()),
                "a path in an existing directory".to_string(),
            )
        }
        _ => (err.to_string(), "a writable file".to_string()),
    };
    Error::invalid("--out", format!("{} ({why})", path.display()), expected)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_and_a_missing_directory_name_the_path_given() {
        let path = Path::new("out/cache.npy");
        let full = std::io::Error::from_raw_os_error(libc::ENOSPC);
        let err = failed(path, 1000, &full);
        assert_eq!(err.argument, "--out");
        assert_eq!(err.value, "out/cache.npy (no space left on its device)");
        assert_eq!(
            err.expected,
            "room for the cache's 1000 bytes on its file system"
        );
        let missing = std::io::Error::from_raw_os_error(libc::ENOENT);
        let err = failed(path, 1000, &missing);
        assert_eq!(err.value, "out/cache.npy (no such directory: out)");
        assert_eq!(err.expected, "a path in an existing directory");
    }
}
