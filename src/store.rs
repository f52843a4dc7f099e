//! The sequence store's layout (docs/data.md, "The sequence store"): the one reader of a store's
//! header and offsets, and the one checker of its files, which Python's `bload.SequenceStore`
//! (through `torch.ops.bload.open_store`) and C++'s `bload::SequenceStore` (through the bridge)
//! both call before they map the field files. Python's `bload.store.write` writes stores.
//!
//! A store is a directory: `header.json` (format, version, count, steps, the offsets' CRC-32,
//! and each field's name, dtype, step shape and file), `offsets.bin` (int64 little-endian
//! [count + 1], 0 first, strictly increasing, `steps` last) and one raw little-endian file per
//! field. Everything is checked here, so a reader maps files whose sizes it can trust; each
//! failure names the file and what was expected. Reads are sized from the header and the file
//! sizes with checked arithmetic: a damaged header is an error, never an overflow or a panic.

use crate::alloc::try_with_capacity;
use crate::error::{Error, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};

pub const STORE_FORMAT: &str = "bload-sequence-store";
pub const STORE_VERSION: u64 = 1;
const HEADER: &str = "header.json";
const OFFSETS: &str = "offsets.bin";

/// The field dtypes a store may hold, with their sizes in bytes.
pub const STORE_DTYPES: [(&str, u64); 13] = [
    ("bool", 1),
    ("uint8", 1),
    ("uint16", 2),
    ("uint32", 4),
    ("uint64", 8),
    ("int8", 1),
    ("int16", 2),
    ("int32", 4),
    ("int64", 8),
    ("float16", 2),
    ("bfloat16", 2),
    ("float32", 4),
    ("float64", 8),
];

/// One field of a checked store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreField {
    pub name: String,
    pub dtype: String,
    /// The shape of one step.
    pub shape: Vec<u64>,
    /// The field's file, in the store's directory.
    pub path: PathBuf,
    /// Bytes of one step, and of the whole file.
    pub step_bytes: u64,
    pub bytes: u64,
}

/// A store whose header, offsets and files were checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreLayout {
    pub count: u64,
    pub steps: u64,
    pub fields: Vec<StoreField>,
    /// [count + 1]: sequence i is steps `offsets[i]..offsets[i + 1]` of every field.
    pub offsets: Vec<i64>,
}

impl StoreLayout {
    /// The layout but the offsets, as JSON: count, steps and each field's name, dtype, shape,
    /// path, step_bytes and bytes (what Python's reader maps).
    pub fn to_json(&self) -> String {
        let fields: Vec<Value> = self
            .fields
            .iter()
            .map(|f| {
                serde_json::json!({"name": f.name, "dtype": f.dtype, "shape": f.shape,
                    "path": f.path.display().to_string(), "step_bytes": f.step_bytes,
                    "bytes": f.bytes})
            })
            .collect();
        serde_json::json!({"count": self.count, "steps": self.steps, "fields": fields}).to_string()
    }
}

/// Opens the store at `dir`: reads its header and offsets and checks them and the field files'
/// sizes (see the module doc).
pub fn open_store(dir: &Path) -> Result<StoreLayout> {
    let header_path = dir.join(HEADER);
    let bad = |path: &Path, found: String, expected: String| {
        Error::invalid(path.display().to_string(), found, expected)
    };
    let text = std::fs::read_to_string(&header_path).map_err(|err| {
        let expected = format!("the JSON header of a {STORE_FORMAT}");
        bad(&header_path, format!("unreadable ({err})"), expected)
    })?;
    let header: Value = serde_json::from_str(&text).map_err(|err| {
        let expected = format!("the JSON header of a {STORE_FORMAT}");
        bad(&header_path, format!("not JSON ({err})"), expected)
    })?;
    let format = header.get("format").and_then(Value::as_str);
    if format != Some(STORE_FORMAT) {
        let found = format!("format {}", header.get("format").unwrap_or(&Value::Null));
        return Err(bad(&header_path, found, format!("format {STORE_FORMAT:?}")));
    }
    let version = header.get("version").unwrap_or(&Value::Null);
    if version.as_u64() != Some(STORE_VERSION) {
        let expected = format!("version {STORE_VERSION}");
        return Err(bad(&header_path, format!("version {version}"), expected));
    }
    let number = |key: &str| header.get(key).and_then(Value::as_u64);
    let layout = "count, steps, offsets_crc32 and fields (name, dtype, shape, file)";
    let (Some(count), Some(steps), Some(crc), Some(fields)) = (
        number("count"),
        number("steps"),
        number("offsets_crc32"),
        header.get("fields").and_then(Value::as_array),
    ) else {
        return Err(bad(
            &header_path,
            "a header without them".into(),
            layout.into(),
        ));
    };
    if count == 0 || fields.is_empty() {
        let found = format!("{count} sequences of {} fields", fields.len());
        let expected = "at least one sequence and one field".to_string();
        return Err(bad(&header_path, found, expected));
    }
    let mut checked: Vec<StoreField> = Vec::new();
    for field in fields {
        let field = store_field(dir, &header_path, field, steps)?;
        // Fields are read by name: of two with one name, a reader would take one, unsaid.
        if checked.iter().any(|earlier| earlier.name == field.name) {
            let found = format!("a header naming field {:?} twice", field.name);
            return Err(bad(&header_path, found, "distinct field names".into()));
        }
        checked.push(field);
    }
    let offsets = read_offsets(&dir.join(OFFSETS), count, steps, crc)?;
    for field in &checked {
        let size = std::fs::metadata(&field.path).map(|m| m.len()).ok();
        check_field_size(field, steps, size)?;
    }
    Ok(StoreLayout {
        count,
        steps,
        fields: checked,
        offsets,
    })
}

/// The error of a field file of `size` bytes (None: missing) if it is not the expected size.
pub fn check_field_size(field: &StoreField, steps: u64, size: Option<u64>) -> Result<()> {
    if size == Some(field.bytes) {
        return Ok(());
    }
    let found = size.map_or("missing".to_string(), |n| format!("a file of {n} bytes"));
    Err(Error::invalid(
        field.path.display().to_string(),
        found,
        format!(
            "{} bytes: {steps} steps of {} {:?} ({} bytes each), as the offsets say",
            field.bytes, field.dtype, field.shape, field.step_bytes
        ),
    ))
}

fn store_field(dir: &Path, header: &Path, field: &Value, steps: u64) -> Result<StoreField> {
    let bad = |expected: &str| {
        Error::invalid(
            header.display().to_string(),
            format!("field {field}"),
            expected,
        )
    };
    let text = |key: &str| field.get(key).and_then(Value::as_str);
    let (Some(name), Some(dtype), Some(file), Some(shape)) = (
        text("name"),
        text("dtype"),
        text("file"),
        field.get("shape").and_then(Value::as_array),
    ) else {
        return Err(bad("a field of name, dtype, shape and file"));
    };
    let Some(&(_, itemsize)) = STORE_DTYPES.iter().find(|(known, _)| *known == dtype) else {
        let names: Vec<_> = STORE_DTYPES.iter().map(|(name, _)| *name).collect();
        return Err(Error::invalid(
            header.display().to_string(),
            format!("field {name:?} of dtype {dtype:?}"),
            format!("one of {}", names.join(", ")),
        ));
    };
    let plain = Path::new(file).file_name().is_some_and(|f| f == file) && file != "..";
    let shape: Option<Vec<u64>> = shape.iter().map(Value::as_u64).collect();
    let Some(shape) = shape.filter(|_| plain) else {
        return Err(bad("a file name in the store and a shape of sizes"));
    };
    let step_bytes = shape.iter().try_fold(itemsize, |n, &d| n.checked_mul(d));
    let bytes = step_bytes.and_then(|n| n.checked_mul(steps));
    let (Some(step_bytes), Some(bytes)) = (step_bytes, bytes) else {
        return Err(bad("a field whose size fits in 64 bits"));
    };
    Ok(StoreField {
        name: name.to_string(),
        dtype: dtype.to_string(),
        shape,
        path: dir.join(file),
        step_bytes,
        bytes,
    })
}

fn read_offsets(path: &Path, count: u64, steps: u64, crc: u64) -> Result<Vec<i64>> {
    let bad = |found: String, expected: String| {
        Error::invalid(path.display().to_string(), found, expected)
    };
    let expected_size = count.checked_add(1).and_then(|n| n.checked_mul(8));
    let size = std::fs::metadata(path).map(|m| m.len()).ok();
    if size.is_none() || size != expected_size {
        let found = size.map_or("missing".to_string(), |n| format!("a file of {n} bytes"));
        let expected = format!(
            "{} int64 offsets, as {HEADER} says",
            count.saturating_add(1)
        );
        return Err(bad(found, expected));
    }
    let bytes = std::fs::read(path)
        .map_err(|err| bad(format!("unreadable ({err})"), "a readable file".into()))?;
    let found_crc = crc32(&bytes);
    if u64::from(found_crc) != crc {
        return Err(bad(
            format!("offsets of CRC-32 {found_crc}"),
            format!("the CRC-32 {crc} that {HEADER} says (the file is damaged or another store's)"),
        ));
    }
    let mut offsets = try_with_capacity(
        &format!("the offsets of {}", path.display()),
        bytes.len() / 8,
    )?;
    offsets.extend(bytes.chunks_exact(8).map(|word| {
        i64::from_le_bytes([
            word[0], word[1], word[2], word[3], word[4], word[5], word[6], word[7],
        ])
    }));
    if offsets[0] != 0 {
        return Err(bad(format!("a first offset of {}", offsets[0]), "0".into()));
    }
    if let Some(i) = offsets.windows(2).position(|pair| pair[1] <= pair[0]) {
        return Err(bad(
            format!(
                "offsets[{i}] = {} then offsets[{}] = {}",
                offsets[i],
                i + 1,
                offsets[i + 1]
            ),
            "strictly increasing offsets (every sequence has a step)".into(),
        ));
    }
    let last = offsets[offsets.len() - 1];
    if u64::try_from(last).ok() != Some(steps) {
        return Err(bad(
            format!("a last offset of {last}"),
            format!("{steps} steps, as {HEADER} says"),
        ));
    }
    Ok(offsets)
}

/// CRC-32 (IEEE 802.3, zlib's `crc32`), the offsets' checksum: a byte a step through a table.
pub fn crc32(bytes: &[u8]) -> u32 {
    !bytes.iter().fold(!0u32, |crc, &byte| {
        CRC_TABLE[usize::from((crc as u8) ^ byte)] ^ (crc >> 8)
    })
}

const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_is_zlibs() {
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    }
}
