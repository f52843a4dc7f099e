//! `bload lengths IN --out F.npy`: a lengths file of any format the core reads, written as the
//! binary cache (a 1-D `.npy`), which every reader of bload then reads without parsing text.
//!
//! Arrow and Parquet columns are read by pyarrow, which this Rust program has not: for them the
//! command says to run `python -m bload lengths`, the same command with the Python readers, rather
//! than carrying a second Arrow reader here.

use crate::cli::args::{given_once, lengths_format};
use crate::cli::usage;
use crate::Failure;
use bload::{read_lengths_and_format, write_npy, Error, LengthsFormat, NpyDtype};
use std::io::Write;
use std::path::PathBuf;

pub fn run(words: &[String], out: &mut impl Write) -> Result<(), Failure> {
    if words.iter().any(|word| word == "-h" || word == "--help") {
        return Ok(writeln!(out, "{}", usage::of("lengths"))?);
    }
    let mut input = None;
    let mut output = None;
    let mut format = None;
    let mut column = None;
    let mut dtype = NpyDtype::Int64;
    let mut seen = Vec::new();
    let mut words = words.iter();
    while let Some(word) = words.next() {
        given_once(&mut seen, word)?;
        let mut value = || {
            words
                .next()
                .map(String::as_str)
                .ok_or_else(|| Failure::Usage(format!("{word} needs a value")))
        };
        match word.as_str() {
            "--out" => output = Some(PathBuf::from(value()?)),
            "--lengths-format" => format = Some(lengths_format(word, value()?)?),
            "--column" => column = Some(value()?.to_string()),
            "--dtype" => {
                dtype = match value()? {
                    "int64" => NpyDtype::Int64,
                    "int32" => NpyDtype::Int32,
                    other => {
                        let expected = "int64 (the default) or int32";
                        return Err(Error::invalid(word, format!("{other:?}"), expected).into());
                    }
                }
            }
            flag if flag.starts_with('-') && flag.len() > 1 => {
                return Err(Failure::Usage(format!(
                    "unknown option {flag:?} for lengths"
                )))
            }
            path if input.is_none() => input = Some(PathBuf::from(path)),
            extra => {
                return Err(Failure::Usage(format!(
                    "one input file is taken, and {extra:?} is a second"
                )))
            }
        }
    }
    let input = input.ok_or_else(|| Failure::Usage("an input file IN is required".into()))?;
    let output = output.ok_or_else(|| Failure::Usage("--out F.npy is required".into()))?;
    if let (Some(column), Some(format)) = (&column, format) {
        if format.read_by_core() {
            return Err(no_column(column, format).into());
        }
    }
    // Read once, whatever IN is (a pipe cannot be read twice): the format comes with the
    // lengths, and a file of Arrow or Parquet is refused there, with or without a column.
    let (format, lengths) = read_lengths_and_format(&input, format)?;
    if let Some(column) = column {
        return Err(no_column(&column, format).into());
    }
    write_npy(&output, &lengths, dtype)?;
    let steps: u64 = lengths.iter().map(|&l| u64::from(l)).sum();
    let name = match dtype {
        NpyDtype::Int32 => "int32",
        NpyDtype::Int64 => "int64",
    };
    writeln!(
        out,
        "{}: {} lengths ({steps} steps) from {} ({format}), as {name}",
        output.display(),
        lengths.len(),
        input.display()
    )?;
    Ok(())
}

/// `--column` given for a format that has no columns.
fn no_column(column: &str, format: LengthsFormat) -> Error {
    Error::invalid(
        "--column",
        format!("{column:?}"),
        format!("no column for a {format} lengths file (columns are Arrow's and Parquet's)"),
    )
}
