//! The one error type of bload: every failure names the argument, the value it had and what was
//! expected, so that a user can fix the input without reading bload's source.

use std::fmt;

/// A rejected input. `Display` reads "`argument` = `value`: expected `expected`".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// What was wrong: an option name, `lengths[i]`, or `file:line` of a lengths file.
    pub argument: String,
    /// The value it had, as the user wrote or passed it.
    pub value: String,
    /// What would have been accepted.
    pub expected: String,
}

impl Error {
    /// An error for `argument`, which had `value`, where `expected` was wanted.
    pub fn invalid(
        argument: impl Into<String>,
        value: impl fmt::Display,
        expected: impl Into<String>,
    ) -> Self {
        Error {
            argument: argument.into(),
            value: value.to_string(),
            expected: expected.into(),
        }
    }
}

impl Error {
    /// Memory for `what`, `len` elements of `size` bytes each, could not be allocated: the error
    /// that takes the place of an abort, saying what was being built and how large.
    pub fn out_of_memory(what: &str, len: usize, size: usize) -> Self {
        let bytes = match len.checked_mul(size) {
            Some(bytes) => format!("{bytes} bytes"),
            None => format!("more than {} bytes", usize::MAX),
        };
        let value = if size == 1 {
            bytes
        } else {
            format!("{len} elements of {size} bytes ({bytes})")
        };
        Error::invalid(
            format!("memory for {what}"),
            value,
            "that much free memory; the allocation failed (out of memory)",
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} = {}: expected {}",
            self.argument, self.value, self.expected
        )
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;
