//! The `.npy` lengths format: a 1-D integer NumPy array (NumPy's "NEP 1" file format, versions
//! 1.0, 2.0 and 3.0), read without NumPy, and written as bload's binary lengths cache.
//!
//! A file is the magic `\x93NUMPY`, a major and minor version byte, the header's length (u16
//! little-endian in 1.0, u32 in 2.0 and 3.0), the header (a Python dict literal with `descr`,
//! `fortran_order` and `shape`, padded with spaces and ended by a newline), then the data. The
//! header is parsed here by a small reader of exactly that literal (strings, booleans, tuples of
//! integers), not by a general evaluator. Integer dtypes of 1 to 8 bytes in either byte order
//! are read; floats, booleans, 2-D arrays and Fortran order are refused. The cache's writer is
//! `cache.rs`.

use super::{grow, length, read_elements, room_for, truncated, Input};
use crate::error::{Error, Result};
use std::io::Read;
use std::path::Path;

pub(super) const MAGIC: &[u8] = b"\x93NUMPY";
const FORMAT: &str = ".npy";
const EXPECTED: &str = "a .npy file of a 1-D integer array (int8..int64 or uint8..uint64, \
                        either byte order, C order)";
/// NumPy itself refuses headers over 10,000 bytes by default; this bound only keeps a corrupt
/// length from asking for gigabytes.
const MAX_HEADER: usize = 1 << 20;

/// An integer dtype: its size in bytes, signedness and byte order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct IntDtype {
    size: usize,
    signed: bool,
    big_endian: bool,
}

/// Reads a `.npy` lengths file (see the module doc).
pub(super) fn read_npy(input: Input) -> Result<Vec<u32>> {
    let Input {
        path,
        size,
        mut reader,
    } = input;
    let eof = |err: &std::io::Error| truncated(path, FORMAT, err, EXPECTED);
    let mut preamble = Vec::with_capacity(8);
    (&mut reader)
        .take(8)
        .read_to_end(&mut preamble)
        .map_err(|e| eof(&e))?;
    if preamble.is_empty() {
        return Err(bad(path, "an empty file (0 bytes)"));
    }
    // A file cut inside its magic is a truncated .npy, not another file.
    let magic = &preamble[..preamble.len().min(MAGIC.len())];
    if !MAGIC.starts_with(magic) {
        return Err(bad(path, "a file without the \\x93NUMPY magic"));
    }
    if preamble.len() < 8 {
        let short = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
        return Err(eof(&short));
    }
    let (header_len, len_bytes) = match preamble[6] {
        1 => {
            let mut len = [0u8; 2];
            reader.read_exact(&mut len).map_err(|e| eof(&e))?;
            (usize::from(u16::from_le_bytes(len)), 2)
        }
        2 | 3 => {
            let mut len = [0u8; 4];
            reader.read_exact(&mut len).map_err(|e| eof(&e))?;
            (
                usize::try_from(u32::from_le_bytes(len)).unwrap_or(usize::MAX),
                4,
            )
        }
        major => {
            let value = format!("format version {major}.{}", preamble[7]);
            return Err(bad(path, &value));
        }
    };
    if header_len > MAX_HEADER {
        return Err(bad(path, &format!("a header of {header_len} bytes")));
    }
    let mut header = vec![0u8; header_len];
    reader.read_exact(&mut header).map_err(|e| eof(&e))?;
    let header = String::from_utf8(header).map_err(|_| bad(path, "a header not in UTF-8"))?;
    let (dtype, count) = parse_header(path, &header)?;
    let expected = format!("{count} elements of {} bytes after the header", dtype.size);
    if let Some(size) = size {
        // The header's claim against what the file holds, before any room is taken for it: a
        // corrupt shape is the file's fault, not the memory's.
        let data = size.saturating_sub((8 + len_bytes + header_len) as u64);
        let claimed = u64::try_from(count)
            .ok()
            .and_then(|count| count.checked_mul(dtype.size as u64));
        if claimed.is_none_or(|claimed| claimed > data) {
            let expected = format!(
                "{expected}, as its shape says (the file has {size} bytes, {data} after the header)"
            );
            let value = format!("a truncated {FORMAT} file");
            return Err(Error::invalid(path.display().to_string(), value, expected));
        }
    }
    let mut lengths = room_for(path, size, count)?;
    read_elements(
        &mut reader,
        count,
        dtype.size,
        |first, bytes| {
            grow(&mut lengths, path, bytes.len() / dtype.size)?;
            for (i, element) in bytes.chunks_exact(dtype.size).enumerate() {
                lengths.push(length(path, first + i, dtype.value(element))?);
            }
            Ok(())
        },
        |err| truncated(path, FORMAT, err, &expected),
    )?;
    let mut rest = [0u8; 1];
    if reader.read(&mut rest).map_err(|e| eof(&e))? > 0 {
        let value = "more data than its shape says";
        return Err(Error::invalid(path.display().to_string(), value, expected));
    }
    Ok(lengths)
}

impl IntDtype {
    /// One element's value.
    fn value(self, bytes: &[u8]) -> i128 {
        let mut word = [0u8; 8];
        if self.big_endian {
            word[8 - self.size..].copy_from_slice(bytes);
        } else {
            word[..self.size].copy_from_slice(bytes);
        }
        let unsigned = if self.big_endian {
            u64::from_be_bytes(word)
        } else {
            u64::from_le_bytes(word)
        };
        if self.signed {
            // Sign-extend from the element's width.
            let shift = 64 - 8 * self.size as u32;
            i128::from(((unsigned << shift) as i64) >> shift)
        } else {
            i128::from(unsigned)
        }
    }

    /// A NumPy type string such as `<i8` or `|u1`, if it names an integer dtype.
    fn parse(descr: &str) -> Option<Self> {
        let bytes = descr.as_bytes();
        let (&order, rest) = bytes.split_first()?;
        let (&kind, size) = rest.split_first()?;
        let size: usize = std::str::from_utf8(size).ok()?.parse().ok()?;
        let signed = match kind {
            b'i' => true,
            b'u' => false,
            _ => return None,
        };
        let big_endian = match (order, size) {
            (b'<', _) | (b'|', 1) => false,
            (b'>', _) => true,
            _ => return None,
        };
        matches!(size, 1 | 2 | 4 | 8).then_some(IntDtype {
            size,
            signed,
            big_endian,
        })
    }
}

fn bad(path: &Path, value: &str) -> Error {
    Error::invalid(path.display().to_string(), value, EXPECTED)
}

/// The dtype and element count of a header, checked.
fn parse_header(path: &Path, header: &str) -> Result<(IntDtype, usize)> {
    let entries = Literal::dict(header).ok_or_else(|| {
        bad(
            path,
            "a header that is not a dict of descr, fortran_order and shape",
        )
    })?;
    // A key given twice reads as its last in NumPy (a Python dict literal) and could be read
    // otherwise here: refused, so that bload and NumPy never read one file two ways.
    if let Some((key, _)) = entries
        .iter()
        .enumerate()
        .find(|&(i, (key, _))| entries[..i].iter().any(|(earlier, _)| earlier == key))
        .map(|(_, entry)| entry)
    {
        return Err(bad(path, &format!("a header naming {key:?} twice")));
    }
    let entry = |key: &str| entries.iter().find(|(k, _)| k == key).map(|(_, v)| v);
    let (Some(Value::Str(descr)), Some(Value::Bool(fortran)), Some(Value::Tuple(shape))) =
        (entry("descr"), entry("fortran_order"), entry("shape"))
    else {
        return Err(bad(path, "a header without descr, fortran_order and shape"));
    };
    let dtype = IntDtype::parse(descr).ok_or_else(|| bad(path, &format!("dtype {descr:?}")))?;
    if *fortran {
        return Err(bad(path, "an array in Fortran order"));
    }
    match shape.as_slice() {
        [count] => Ok((dtype, *count)),
        _ => Err(bad(
            path,
            &format!("an array of {}-D shape {shape:?}", shape.len()),
        )),
    }
}

enum Value {
    Str(String),
    Bool(bool),
    Tuple(Vec<usize>),
}

/// A reader of the header's Python literal, a character at a time.
struct Literal<'a> {
    text: &'a [u8],
    at: usize,
}

impl Literal<'_> {
    fn dict(text: &str) -> Option<Vec<(String, Value)>> {
        let mut reader = Literal {
            text: text.as_bytes(),
            at: 0,
        };
        reader.expect(b'{')?;
        let mut entries = Vec::new();
        while !reader.eat(b'}') {
            let key = reader.string()?;
            reader.expect(b':')?;
            let value = reader.value()?;
            entries.push((key, value));
            if !reader.eat(b',') {
                reader.expect(b'}')?;
                break;
            }
        }
        reader.skip_spaces();
        (reader.at == reader.text.len()).then_some(entries)
    }

    fn skip_spaces(&mut self) {
        while self.text.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    /// Whether the next character (after spaces) is `byte`, consumed if so.
    fn eat(&mut self, byte: u8) -> bool {
        self.skip_spaces();
        let found = self.text.get(self.at) == Some(&byte);
        self.at += usize::from(found);
        found
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        self.eat(byte).then_some(())
    }

    fn string(&mut self) -> Option<String> {
        self.skip_spaces();
        let quote = *self
            .text
            .get(self.at)
            .filter(|&&q| q == b'\'' || q == b'"')?;
        let start = self.at + 1;
        let len = self.text.get(start..)?.iter().position(|&b| b == quote)?;
        self.at = start + len + 1;
        String::from_utf8(self.text[start..start + len].to_vec()).ok()
    }

    fn value(&mut self) -> Option<Value> {
        self.skip_spaces();
        let rest = self.text.get(self.at..)?;
        for (word, value) in [(&b"True"[..], true), (&b"False"[..], false)] {
            if rest.starts_with(word) {
                self.at += word.len();
                return Some(Value::Bool(value));
            }
        }
        if !self.eat(b'(') {
            return self.string().map(Value::Str);
        }
        let mut items = Vec::new();
        while !self.eat(b')') {
            self.skip_spaces();
            let digits = self.text[self.at..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
            let number = std::str::from_utf8(&self.text[self.at..self.at + digits]).ok()?;
            items.push(number.parse().ok()?);
            self.at += digits;
            // Python 2 wrote long integers with an L.
            self.eat(b'L');
            if !self.eat(b',') {
                self.expect(b')')?;
                break;
            }
        }
        Some(Value::Tuple(items))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_descrs_parse_and_others_do_not() {
        let dtype = IntDtype::parse(">i2").unwrap();
        assert_eq!(
            (dtype.size, dtype.signed, dtype.big_endian),
            (2, true, true)
        );
        assert_eq!(dtype.value(&[0xff, 0xfe]), -2);
        let dtype = IntDtype::parse("<u4").unwrap();
        assert_eq!(dtype.value(&[1, 0, 0, 0x80]), 0x8000_0001);
        assert!(IntDtype::parse("|u1").is_some());
        for refused in ["<f8", "|b1", "<i3", "|i2", "=i8", "<i16", "", "<"] {
            assert!(IntDtype::parse(refused).is_none(), "{refused}");
        }
    }

    #[test]
    fn headers_as_numpy_writes_them_and_odd_ones() {
        let path = Path::new("x.npy");
        let header = "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }    \n";
        assert_eq!(parse_header(path, header).unwrap().1, 3);
        let header = "{\"shape\":(12L,),\"fortran_order\":False,\"descr\":\"|u1\"}";
        assert_eq!(parse_header(path, header).unwrap().1, 12);
        for (header, value) in [
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",
                "dtype \"<f4\"",
            ),
            (
                "{'descr': '<i4', 'fortran_order': True, 'shape': (3,), }",
                "an array in Fortran order",
            ),
            (
                "{'descr': '<i4', 'fortran_order': False, 'shape': (3, 2), }",
                "an array of 2-D shape [3, 2]",
            ),
            (
                "{'descr': '<i4', 'fortran_order': False, 'shape': (), }",
                "an array of 0-D shape []",
            ),
            (
                "{'descr': '<i4', 'shape': (3,), }",
                "a header without descr, fortran_order and shape",
            ),
            (
                "{'descr': '<i4' 'shape'",
                "a header that is not a dict of descr, fortran_order and shape",
            ),
            (
                "{'descr': '|u1', 'fortran_order': False, 'shape': (4,), 'descr': '<u4', }",
                "a header naming \"descr\" twice",
            ),
        ] {
            let err = parse_header(path, header).unwrap_err();
            assert_eq!(
                (err.argument.as_str(), err.value.as_str()),
                ("x.npy", value),
                "{header}"
            );
            assert!(err.expected.contains("1-D integer array"));
        }
    }
}
