//! The text lengths format, bload's first: readable and writable by hand, diffable, and the
//! format every example ships. Its reader is the only one (`super` dispatches to it).
//!
//! The format, decided once (README, "Lengths files"):
//! - UTF-8 text, one sequence length per line: a decimal integer from 1 to 2^32 - 1, with
//!   optional spaces or tabs around it;
//! - lines end in LF or CRLF, and the last line may lack its end;
//! - `#` starts a comment that runs to the end of its line;
//! - lines that are blank once the comment is removed are skipped (they hold no sequence);
//! - anything else is an error naming the file and line; a file with no length is an error.

use crate::alloc::{out_of_memory, try_with_capacity};
use crate::error::{Error, Result};
use std::io::ErrorKind;
use std::path::Path;

const EXPECTED: &str = "one sequence length per line, an integer from 1 to 4294967295";
/// Characters of a bad line that an error quotes: enough to recognise it, never a whole file.
const QUOTED_CHARS: usize = 40;

/// Reads a text lengths file (see the module doc for the format).
pub fn read_text(path: &Path) -> Result<Vec<u32>> {
    // std reads a file into memory with fallible allocations: too large a file is an error.
    let text = std::fs::read_to_string(path).map_err(|err| {
        if err.kind() == ErrorKind::OutOfMemory {
            let bytes = std::fs::metadata(path).map_or(0, |file| file.len());
            let what = format!("the text of {}", path.display());
            return out_of_memory::<u8>(&what, usize::try_from(bytes).unwrap_or(usize::MAX));
        }
        Error::invalid(
            "lengths file",
            path.display(),
            format!("a readable UTF-8 text file ({err})"),
        )
    })?;
    parse_lengths(&text, &path.display().to_string())
}

/// Parses the text of a lengths file; `source` names it in errors.
pub fn parse_lengths(text: &str, source: &str) -> Result<Vec<u32>> {
    // A length a line at most: counting the lines sizes the lengths before any is read.
    let lines = text.bytes().filter(|&byte| byte == b'\n').count() + 1;
    let mut lengths = try_with_capacity(&format!("the lengths of {source}"), lines)?;
    for (number, line) in (1..).zip(text.lines()) {
        let field = line.split('#').next().unwrap_or_default().trim();
        if field.is_empty() {
            continue;
        }
        let at = || format!("{source}:{number}");
        if field.starts_with('-') && field[1..].bytes().all(|b| b.is_ascii_digit()) {
            let value = format!("{} (negative)", quoted(field));
            return Err(Error::invalid(at(), value, EXPECTED));
        }
        if !field.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Error::invalid(at(), quoted(field), EXPECTED));
        }
        match field.parse::<u32>() {
            Ok(0) => return Err(Error::invalid(at(), "0 (an empty sequence)", EXPECTED)),
            Ok(length) => lengths.push(length),
            Err(_) => {
                let value = format!("{} (too large)", quoted(field));
                return Err(Error::invalid(at(), value, EXPECTED));
            }
        }
    }
    if lengths.is_empty() {
        return Err(Error::invalid(
            source,
            "a file with no length",
            "at least one sequence length",
        ));
    }
    Ok(lengths)
}

/// `field` in quotes, cut to its first characters when it is long.
fn quoted(field: &str) -> String {
    match field.char_indices().nth(QUOTED_CHARS) {
        Some((cut, _)) => format!("{:?}... ({} bytes)", &field[..cut], field.len()),
        None => format!("{field:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_length_per_line_with_blanks_comments_and_crlf() {
        let text = "# clip lengths\n3\n10\r\n 7 \n\n  \t\n12 # the longest\r\n5";
        assert_eq!(parse_lengths(text, "x").unwrap(), vec![3, 10, 7, 12, 5]);
        assert_eq!(parse_lengths("3\n4\n\n", "x").unwrap(), vec![3, 4]);
        assert_eq!(parse_lengths("4294967295", "x").unwrap(), vec![u32::MAX]);
    }

    #[test]
    fn bad_lines_name_the_line() {
        for (text, line, value) in [
            ("3\n\n-4\n", "x:3", "\"-4\" (negative)"),
            ("3\n4\nfive\n", "x:3", "\"five\""),
            ("0\n", "x:1", "0 (an empty sequence)"),
            ("4294967296\n", "x:1", "\"4294967296\" (too large)"),
            ("1.5\n", "x:1", "\"1.5\""),
            ("3 4\n", "x:1", "\"3 4\""),
            ("+3\n", "x:1", "\"+3\""),
        ] {
            let err = parse_lengths(text, "x").unwrap_err();
            assert_eq!(err.argument, line, "{text:?}");
            assert_eq!(err.value, value, "{text:?}");
            assert!(err.to_string().contains("one sequence length per line"));
        }
        for empty in ["", "\n\n", "# nothing\n"] {
            let err = parse_lengths(empty, "x").unwrap_err();
            assert_eq!(err.value, "a file with no length", "{empty:?}");
        }
    }

    #[test]
    fn a_long_bad_line_is_quoted_in_part() {
        let line = "x".repeat(2 << 20);
        let err = parse_lengths(&line, "x").unwrap_err();
        assert_eq!(
            err.value,
            format!("{:?}... (2097152 bytes)", "x".repeat(40))
        );
    }

    #[test]
    fn missing_file_is_an_error() {
        let err = read_text(Path::new("/nonexistent/bload.lengths")).unwrap_err();
        assert_eq!(err.argument, "lengths file");
        assert!(err.value.contains("/nonexistent/bload.lengths"));
    }
}
