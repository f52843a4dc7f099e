//! Lengths files: the one home of every lengths format the core reads, shared by the CLI, C++
//! (`bload::read_lengths`) and Python (`torch.ops.bload.read_lengths`), so that a file means the
//! same thing everywhere. One file per format:
//! - `text`: bload's own, one length per line (README, "Lengths files");
//! - `npy`: a 1-D integer NumPy array, also the binary cache that `bload lengths` writes;
//! - `idx`: a Megatron `.idx` index, whose header carries an int32 length per sequence.
//!
//! Arrow IPC and Parquet list columns hold their lengths in offsets that only an Arrow reader
//! decodes; the core names them (so that detection has one home) and Python reads them with
//! pyarrow. A file's format is chosen by its first bytes, then by its extension, and text
//! otherwise; a caller may force one. Every reader streams the file through a small buffer into
//! the lengths, so memory is the lengths' own, and refuses bad contents with an error naming the
//! file, the format and what was expected, never a panic.

mod idx;
mod npy;
mod text;

pub use npy::{write_npy, NpyDtype};
pub use text::parse_lengths;

use crate::error::{Error, Result};
use std::fmt;
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::Path;
use std::str::FromStr;

/// A lengths file's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LengthsFormat {
    Text,
    Npy,
    Idx,
    /// An Arrow IPC file or stream (Hugging Face datasets' cache files): Python reads it.
    Arrow,
    /// A Parquet file: Python reads it.
    Parquet,
}

/// What is expected of a sequence length in any binary format.
const LENGTH: &str = "a sequence length, an integer from 1 to 4294967295";

impl LengthsFormat {
    pub const ALL: [LengthsFormat; 5] = [
        LengthsFormat::Text,
        LengthsFormat::Npy,
        LengthsFormat::Idx,
        LengthsFormat::Arrow,
        LengthsFormat::Parquet,
    ];

    /// The name `--lengths-format` and `format=` take.
    pub fn name(self) -> &'static str {
        match self {
            LengthsFormat::Text => "text",
            LengthsFormat::Npy => "npy",
            LengthsFormat::Idx => "idx",
            LengthsFormat::Arrow => "arrow",
            LengthsFormat::Parquet => "parquet",
        }
    }

    /// Whether the core reads the format (Arrow and Parquet need pyarrow, in Python).
    pub fn read_by_core(self) -> bool {
        !matches!(self, LengthsFormat::Arrow | LengthsFormat::Parquet)
    }

    /// The format a file's first bytes announce, if any.
    fn from_magic(head: &[u8]) -> Option<Self> {
        if head.starts_with(npy::MAGIC) {
            Some(LengthsFormat::Npy)
        } else if head.starts_with(idx::MAGIC) {
            Some(LengthsFormat::Idx)
        } else if head.starts_with(b"ARROW1") || head.starts_with(&[0xff; 4]) {
            // The IPC file format, or the stream format (a continuation marker first), which
            // no text file can start with (0xff is never UTF-8).
            Some(LengthsFormat::Arrow)
        } else if head.starts_with(b"PAR1") {
            Some(LengthsFormat::Parquet)
        } else {
            None
        }
    }

    fn from_extension(path: &Path) -> Option<Self> {
        let extension = path.extension()?.to_str()?.to_ascii_lowercase();
        match extension.as_str() {
            "npy" => Some(LengthsFormat::Npy),
            "idx" => Some(LengthsFormat::Idx),
            "arrow" | "feather" | "ipc" => Some(LengthsFormat::Arrow),
            "parquet" | "pq" => Some(LengthsFormat::Parquet),
            _ => None,
        }
    }
}

impl fmt::Display for LengthsFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for LengthsFormat {
    type Err = Error;

    fn from_str(name: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|format| format.name() == name)
            .ok_or_else(|| {
                let names: Vec<_> = Self::ALL.iter().map(|f| f.name()).collect();
                Error::invalid(
                    "lengths format",
                    format!("{name:?}"),
                    format!("one of {}", names.join(", ")),
                )
            })
    }
}

/// The format of the file at `path`: the one its first bytes announce, else the one its
/// extension names, else text.
pub fn detect_format(path: &Path) -> Result<LengthsFormat> {
    let mut head = Vec::with_capacity(16);
    open(path, "lengths")?
        .take(16)
        .read_to_end(&mut head)
        .map_err(|err| unreadable(path, "lengths", &err))?;
    Ok(LengthsFormat::from_magic(&head)
        .or_else(|| LengthsFormat::from_extension(path))
        .unwrap_or(LengthsFormat::Text))
}

/// Reads a lengths file of any format the core reads, chosen by [`detect_format`].
pub fn read_lengths(path: &Path) -> Result<Vec<u32>> {
    read_lengths_as(path, None)
}

/// Reads a lengths file as `format`, or as the format detected when `None`.
pub fn read_lengths_as(path: &Path, format: Option<LengthsFormat>) -> Result<Vec<u32>> {
    let format = match format {
        Some(format) => format,
        None => detect_format(path)?,
    };
    match format {
        LengthsFormat::Text => text::read_text(path),
        LengthsFormat::Npy => npy::read_npy(path),
        LengthsFormat::Idx => idx::read_idx(path),
        LengthsFormat::Arrow | LengthsFormat::Parquet => Err(Error::invalid(
            path.display().to_string(),
            if format == LengthsFormat::Arrow {
                "an Arrow IPC file"
            } else {
                "a Parquet file"
            },
            "a text, .npy or .idx lengths file: bload's Rust core reads no Arrow or Parquet; \
             read its lengths in Python (bload.read_lengths(path, column=...)), or write their \
             cache with `python -m bload lengths FILE --column C --out F.npy`",
        )),
    }
}

/// The file at `path`, opened for a reader of `format`.
fn open(path: &Path, format: &str) -> Result<File> {
    File::open(path).map_err(|err| unreadable(path, format, &err))
}

fn unreadable(path: &Path, format: &str, err: &std::io::Error) -> Error {
    Error::invalid(
        "lengths file",
        path.display(),
        format!("a readable {format} file ({err})"),
    )
}

/// The error of a file that ends before `expected` bytes (or fails to read).
fn truncated(path: &Path, format: &str, err: &std::io::Error, expected: &str) -> Error {
    if err.kind() == ErrorKind::UnexpectedEof {
        Error::invalid(
            path.display().to_string(),
            format!("a truncated {format} file"),
            expected,
        )
    } else {
        unreadable(path, format, err)
    }
}

/// Reads `count` elements of `size` bytes from `reader`, a chunk at a time, handing each chunk to
/// `convert` with the index of its first element. The file must hold them all.
fn read_elements(
    reader: &mut impl Read,
    count: usize,
    size: usize,
    mut convert: impl FnMut(usize, &[u8]) -> Result<()>,
    on_error: impl Fn(&std::io::Error) -> Error,
) -> Result<()> {
    const CHUNK: usize = 1 << 16;
    let mut buffer = vec![0u8; CHUNK * size];
    let mut done = 0;
    while done < count {
        let n = (count - done).min(CHUNK);
        let bytes = &mut buffer[..n * size];
        reader.read_exact(bytes).map_err(|err| on_error(&err))?;
        convert(done, bytes)?;
        done += n;
    }
    Ok(())
}

/// `value`, the `index`-th length of `path`, as a sequence length.
fn length(path: &Path, index: usize, value: i128) -> Result<u32> {
    match u32::try_from(value) {
        Ok(length) if length > 0 => Ok(length),
        _ => {
            let why = if value <= 0 {
                " (not positive)"
            } else {
                " (too large)"
            };
            Err(Error::invalid(
                format!("{}[{index}]", path.display()),
                format!("{value}{why}"),
                LENGTH,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magic_decides_before_the_extension() {
        assert_eq!(
            LengthsFormat::from_magic(b"\x93NUMPY\x01\x00"),
            Some(LengthsFormat::Npy)
        );
        assert_eq!(
            LengthsFormat::from_magic(b"MMIDIDX\x00\x00\x01"),
            Some(LengthsFormat::Idx)
        );
        assert_eq!(
            LengthsFormat::from_magic(b"PAR1...."),
            Some(LengthsFormat::Parquet)
        );
        assert_eq!(LengthsFormat::from_magic(b"3\n4\n"), None);
        let extension = |name: &str| LengthsFormat::from_extension(Path::new(name));
        assert_eq!(extension("a/b.NPY"), Some(LengthsFormat::Npy));
        assert_eq!(extension("train.idx"), Some(LengthsFormat::Idx));
        assert_eq!(extension("x.lengths"), None);
    }

    #[test]
    fn format_names_round_trip_and_a_bad_one_lists_them() {
        for format in LengthsFormat::ALL {
            assert_eq!(format.name().parse::<LengthsFormat>().unwrap(), format);
        }
        let err = "csv".parse::<LengthsFormat>().unwrap_err();
        assert_eq!(err.expected, "one of text, npy, idx, arrow, parquet");
    }

    #[test]
    fn lengths_must_fit_a_u32_and_be_positive() {
        let path = Path::new("f.npy");
        assert_eq!(length(path, 0, 7).unwrap(), 7);
        assert_eq!(length(path, 0, 4294967295).unwrap(), u32::MAX);
        let err = length(path, 3, 0).unwrap_err();
        assert_eq!(
            (err.argument.as_str(), err.value.as_str()),
            ("f.npy[3]", "0 (not positive)")
        );
        let err = length(path, 4, 1 << 32).unwrap_err();
        assert_eq!(err.value, "4294967296 (too large)");
    }
}
