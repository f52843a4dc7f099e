//! The text lengths format, bload's first: readable and writable by hand, diffable, and the
//! format every example ships. Its reader is the only one (`super` dispatches to it).
//!
//! The format, decided once (README, "Lengths files"):
//! - UTF-8 text, one sequence length per line: a decimal integer from 1 to 2^32 - 1, with
//!   optional spaces or tabs around it;
//! - lines end in LF or CRLF, and the last line may lack its end;
//! - `#` starts a comment that runs to the end of its line;
//! - lines that are blank once the comment is removed are skipped (they hold no sequence);
//! - anything else is an error naming the file and line, a NUL byte or a line over a mebibyte
//!   included (a binary file or an endless device); a file with no length is an error.

use super::{grow, lengths_of, Input};
use crate::alloc::try_with_capacity;
use crate::error::{Error, Result};
use std::io::{BufRead, Read};

const EXPECTED: &str = "one sequence length per line, an integer from 1 to 4294967295";
/// Characters of a bad line that an error quotes: enough to recognise it, never a whole file.
const QUOTED_CHARS: usize = 40;
/// The longest line a file may hold, comment included: a length takes ten digits, so a longer
/// line is no lengths file's, and an endless line (`/dev/zero`, a binary file) ends here.
const MAX_LINE: usize = 1 << 20;

/// Reads a text lengths file (see the module doc for the format) a line at a time, parsing each
/// as it comes: a bad line is refused when it is read, so a device that never ends (`/dev/zero`,
/// `/dev/urandom`) is refused at its first line, never read to its end.
pub(super) fn read_text(mut input: Input) -> Result<Vec<u32>> {
    let source = input.path.display().to_string();
    // A length takes at least two bytes, a digit and a line end (the last line one): a regular
    // file's size bounds how many it holds, so that room is taken at once (and a file too large
    // for memory is refused before it is read); a pipe's lengths are given room as they come.
    let mut lengths = match input.size {
        Some(size) => {
            let most = usize::try_from(size / 2 + 1).unwrap_or(usize::MAX);
            try_with_capacity(&lengths_of(input.path), most)?
        }
        None => Vec::new(),
    };
    let mut line = Vec::new();
    for number in 1.. {
        line.clear();
        let read = (&mut input.reader)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(|err| {
                Error::invalid(
                    "lengths file",
                    input.path.display(),
                    format!("a readable text file ({err})"),
                )
            })?;
        if read == 0 {
            break;
        }
        let at = || format!("{source}:{number}");
        if let Some(column) = line.iter().position(|&byte| byte == 0) {
            let value = format!("a NUL byte at column {} (a binary file?)", column + 1);
            return Err(Error::invalid(at(), value, EXPECTED));
        }
        if line.last() == Some(&b'\n') {
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
        } else if line.len() > MAX_LINE {
            let value = format!("a line longer than {MAX_LINE} bytes");
            return Err(Error::invalid(at(), value, EXPECTED));
        }
        let Ok(text) = std::str::from_utf8(&line) else {
            return Err(Error::invalid(at(), "bytes that are not UTF-8", EXPECTED));
        };
        if let Some(length) = parse_line(text, &at)? {
            if lengths.len() == lengths.capacity() {
                grow(&mut lengths, input.path, 1)?;
            }
            lengths.push(length);
        }
    }
    finish(lengths, &source)
}

/// Parses the text of a lengths file; `source` names it in errors.
pub fn parse_lengths(text: &str, source: &str) -> Result<Vec<u32>> {
    // A length a line at most: counting the lines sizes the lengths before any is read.
    let lines = text.bytes().filter(|&byte| byte == b'\n').count() + 1;
    let mut lengths = try_with_capacity(&format!("the lengths of {source}"), lines)?;
    for (number, line) in (1..).zip(text.lines()) {
        if let Some(length) = parse_line(line, &|| format!("{source}:{number}"))? {
            lengths.push(length);
        }
    }
    finish(lengths, source)
}

/// The length on `line` (its end removed), `None` for a blank or comment line; `at` names the
/// line in errors.
fn parse_line(line: &str, at: &dyn Fn() -> String) -> Result<Option<u32>> {
    // Spaces and tabs around the length, as the format says: no other whitespace (a form feed,
    // a no-break space, a stray carriage return) passes for blank.
    let field = line
        .split('#')
        .next()
        .unwrap_or_default()
        .trim_matches([' ', '\t']);
    if field.is_empty() {
        return Ok(None);
    }
    if field.starts_with('-') && field[1..].bytes().all(|b| b.is_ascii_digit()) {
        let value = format!("{} (negative)", quoted(field));
        return Err(Error::invalid(at(), value, EXPECTED));
    }
    if !field.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Error::invalid(at(), quoted(field), EXPECTED));
    }
    match field.parse::<u32>() {
        Ok(0) => Err(Error::invalid(at(), "0 (an empty sequence)", EXPECTED)),
        Ok(length) => Ok(Some(length)),
        Err(_) => {
            let value = format!("{} (too large)", quoted(field));
            Err(Error::invalid(at(), value, EXPECTED))
        }
    }
}

/// The lengths read, unless there are none; room taken for more than the file held is given
/// back.
fn finish(mut lengths: Vec<u32>, source: &str) -> Result<Vec<u32>> {
    if lengths.is_empty() {
        return Err(Error::invalid(
            source,
            "a file with no length",
            "at least one sequence length",
        ));
    }
    lengths.shrink_to_fit();
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
    use std::path::Path;

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
            // Only spaces and tabs are blank around a length.
            ("3\n\x0c4\n", "x:2", "\"\\u{c}4\""),
            ("3\u{a0}\n", "x:1", "\"3\\u{a0}\""),
            ("3\r\r\n", "x:1", "\"3\\r\""),
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
        let path = Path::new("/nonexistent/bload.lengths");
        let err = super::super::read_lengths(path).unwrap_err();
        assert_eq!(err.argument, "lengths file");
        assert!(err.value.contains("/nonexistent/bload.lengths"));
    }
}
