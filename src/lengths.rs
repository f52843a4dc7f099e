//! Lengths files: one sequence length (in steps) per line.

use crate::error::{Error, Result};
use std::path::Path;

/// Reads a lengths file. Every line must hold one integer from 1 to 2^32 - 1; an empty line, a
/// negative number or anything else is an error that names the file and the line number.
pub fn read_lengths(path: &Path) -> Result<Vec<u32>> {
    let text = std::fs::read_to_string(path).map_err(|err| {
        Error::invalid(
            "lengths file",
            path.display(),
            format!("a readable text file ({err})"),
        )
    })?;
    parse_lengths(&text, &path.display().to_string())
}

/// Parses the text of a lengths file; `source` names it in errors.
pub fn parse_lengths(text: &str, source: &str) -> Result<Vec<u32>> {
    const EXPECTED: &str = "one sequence length per line, an integer from 1 to 4294967295";
    let mut lengths = Vec::with_capacity(text.len() / 3);
    for (number, line) in (1..).zip(text.lines()) {
        let field = line.trim();
        let at = || format!("{source}:{number}");
        if field.is_empty() {
            return Err(Error::invalid(at(), "an empty line", EXPECTED));
        }
        if field.starts_with('-') && field[1..].bytes().all(|b| b.is_ascii_digit()) {
            return Err(Error::invalid(
                at(),
                format!("{field:?} (negative)"),
                EXPECTED,
            ));
        }
        match field.parse::<u32>() {
            Ok(0) => return Err(Error::invalid(at(), "0 (an empty sequence)", EXPECTED)),
            Ok(length) => lengths.push(length),
            Err(_) => return Err(Error::invalid(at(), format!("{field:?}"), EXPECTED)),
        }
    }
    if lengths.is_empty() {
        return Err(Error::invalid(
            source,
            "an empty file",
            "at least one sequence length",
        ));
    }
    Ok(lengths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_one_length_per_line() {
        assert_eq!(
            parse_lengths("3\n10\r\n 7 \n", "x").unwrap(),
            vec![3, 10, 7]
        );
    }

    #[test]
    fn bad_lines_name_the_line() {
        for (text, line, value) in [
            ("3\n\n4\n", "x:2", "an empty line"),
            ("3\n-4\n", "x:2", "\"-4\" (negative)"),
            ("3\n4\nfive\n", "x:3", "\"five\""),
            ("0\n", "x:1", "0 (an empty sequence)"),
            ("99999999999\n", "x:1", "\"99999999999\""),
            ("1.5\n", "x:1", "\"1.5\""),
        ] {
            let err = parse_lengths(text, "x").unwrap_err();
            assert_eq!(err.argument, line, "{text:?}");
            assert_eq!(err.value, value, "{text:?}");
            assert!(err.to_string().contains("one sequence length per line"));
        }
        let err = parse_lengths("", "x").unwrap_err();
        assert_eq!(err.value, "an empty file");
    }

    #[test]
    fn missing_file_is_an_error() {
        let err = read_lengths(Path::new("/nonexistent/bload.lengths")).unwrap_err();
        assert_eq!(err.argument, "lengths file");
        assert!(err.value.contains("/nonexistent/bload.lengths"));
    }
}
