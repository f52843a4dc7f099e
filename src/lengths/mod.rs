//! Lengths files: the one home of every lengths format the core reads, shared by the CLI, C++
//! (`bload::read_lengths`) and Python (`torch.ops.bload.read_lengths`), so that a file means the
//! same thing everywhere. One file per format:
//! - `text`: bload's own, one length per line (README, "Lengths files");
//! - `npy`: a 1-D integer NumPy array, also the binary cache that `bload lengths` writes
//!   (`cache`, its writer);
//! - `idx`: a Megatron `.idx` index, whose header carries an int32 length per sequence.
//!
//! Arrow IPC and Parquet list columns hold their lengths in offsets that only an Arrow reader
//! decodes; the core names them (so that detection has one home) and Python reads them with
//! pyarrow. A file's format is chosen by its first bytes, then by its extension, and text
//! otherwise; a caller may force one. A file is opened and read once, whatever it is (a pipe or
//! a FIFO cannot be read twice): the first bytes that choose the format are parsed with the rest.
//! Every reader parses the file as it streams through a small buffer into the lengths, so memory
//! is the lengths' own and an endless device is refused at its first bad line or element, and
//! refuses bad contents with an error naming the file, the format and what was expected, never a
//! panic.

mod cache;
mod idx;
mod npy;
mod text;

pub use cache::{write_npy, NpyDtype};
pub use text::parse_lengths;

use crate::alloc::{out_of_memory, try_with_capacity};
use crate::error::{Error, Result};
use std::fmt;
use std::fs::File;
use std::io::{BufReader, Chain, Cursor, ErrorKind, Read};
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

    /// The format of a file that starts with `head`, at `path`: its magic's, else its
    /// extension's, else text.
    fn detect(head: &[u8], path: &Path) -> Self {
        Self::from_magic(head)
            .or_else(|| Self::from_extension(path))
            .unwrap_or(LengthsFormat::Text)
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
    let mut file = open(path, "lengths")?;
    let head = read_head(path, &mut file)?;
    Ok(LengthsFormat::detect(&head, path))
}

/// Reads a lengths file of any format the core reads, chosen by [`detect_format`].
pub fn read_lengths(path: &Path) -> Result<Vec<u32>> {
    read_lengths_as(path, None)
}

/// Reads a lengths file as `format`, or as the format detected when `None`.
pub fn read_lengths_as(path: &Path, format: Option<LengthsFormat>) -> Result<Vec<u32>> {
    read_lengths_and_format(path, format).map(|(_, lengths)| lengths)
}

/// Reads a lengths file as `format`, or as the format detected when `None`, and says which
/// format it was read as. The file is opened and read once, from its first byte to its last:
/// the bytes that decide the format are the first the reader parses, so a pipe, a FIFO or
/// `/dev/stdin`, which cannot be opened or read twice, reads as the same bytes in a file would.
pub fn read_lengths_and_format(
    path: &Path,
    format: Option<LengthsFormat>,
) -> Result<(LengthsFormat, Vec<u32>)> {
    let mut file = open(path, "lengths")?;
    // A regular file's size bounds what it can hold; a pipe's or a device's is unknown.
    let size = file
        .metadata()
        .ok()
        .filter(|metadata| metadata.is_file())
        .map(|metadata| metadata.len());
    let head = read_head(path, &mut file)?;
    let format = format.unwrap_or_else(|| LengthsFormat::detect(&head, path));
    let input = Input {
        path,
        size,
        reader: BufReader::with_capacity(1 << 16, Cursor::new(head).chain(file)),
    };
    let lengths = match format {
        LengthsFormat::Text => text::read_text(input),
        LengthsFormat::Npy => npy::read_npy(input),
        LengthsFormat::Idx => idx::read_idx(input),
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
    }?;
    // (The text reader names an empty file itself.)
    if lengths.is_empty() {
        let kind = if format == LengthsFormat::Npy {
            "a .npy file with no length"
        } else {
            "a Megatron .idx file with no length"
        };
        return Err(Error::invalid(
            path.display().to_string(),
            kind,
            "at least one sequence length",
        ));
    }
    Ok((format, lengths))
}

/// An opened lengths file, read once through `reader` from its first byte (the head that chose
/// its format is put back in front of the rest).
struct Input<'a> {
    path: &'a Path,
    /// The file's size in bytes when it is a regular file; `None` for a pipe or a device.
    size: Option<u64>,
    reader: BufReader<Chain<Cursor<Vec<u8>>, File>>,
}

/// Bytes of a file's head that decide its format (the longest magic is 9).
const HEAD: u64 = 16;

/// The first [`HEAD`] bytes of `file` (fewer if it ends first).
fn read_head(path: &Path, file: &mut File) -> Result<Vec<u8>> {
    let mut head = Vec::with_capacity(HEAD as usize);
    file.take(HEAD)
        .read_to_end(&mut head)
        .map_err(|err| unreadable(path, "lengths", &err))?;
    Ok(head)
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

/// What the lengths of `path` are called in an out-of-memory error.
fn lengths_of(path: &Path) -> String {
    format!("the lengths of {}", path.display())
}

/// Room for the lengths of a file that claims `count` of them: all of them when the file's size
/// was checked to hold them, else (a pipe, whose claim nothing bounds yet) a chunk, grown by
/// [`grow`] as they arrive, so that a false claim ends at the stream's end, not in memory.
fn room_for(path: &Path, size: Option<u64>, count: usize) -> Result<Vec<u32>> {
    let capacity = match size {
        Some(_) => count,
        None => count.min(1 << 16),
    };
    try_with_capacity(&lengths_of(path), capacity)
}

/// Room for `additional` more lengths, grown as `Vec::push` grows (doubling), fallibly.
fn grow(lengths: &mut Vec<u32>, path: &Path, additional: usize) -> Result<()> {
    lengths
        .try_reserve(additional)
        .map_err(|_| out_of_memory::<u32>(&lengths_of(path), lengths.len() + additional))
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
    fn a_npy_file_of_no_lengths_is_refused_naming_it() {
        let dir = std::env::temp_dir().join(format!("bload-empty-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("empty.npy");
        cache::write_npy(&path, &[], cache::NpyDtype::Int64).unwrap();
        let err = read_lengths_and_format(&path, None).unwrap_err();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(err.argument, path.display().to_string());
        assert_eq!(err.value, "a .npy file with no length");
        assert_eq!(err.expected, "at least one sequence length");
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
