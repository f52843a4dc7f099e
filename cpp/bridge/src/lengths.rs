//! Lengths files across the bridge: the core's readers of every format it reads (text, `.npy`,
//! Megatron `.idx`), widened to the int64 C++ and Python hold lengths in, and the format a file
//! has, by its first bytes and extension.

use crate::guard::{guarded, sized, BridgeError};

pub(crate) fn read_lengths_file(path: &str, format: &str) -> Result<Vec<i64>, BridgeError> {
    guarded("read_lengths_file", || {
        let format = match format {
            "" => None,
            name => Some(name.parse()?),
        };
        let lengths = bload::read_lengths_as(std::path::Path::new(path), format)?;
        let mut wide = sized("the lengths as 64-bit integers", lengths.len())?;
        wide.extend(lengths.into_iter().map(i64::from));
        Ok(wide)
    })
}

pub(crate) fn detect_lengths_format(path: &str) -> Result<String, BridgeError> {
    guarded("detect_lengths_format", || {
        Ok(bload::detect_format(std::path::Path::new(path))?.to_string())
    })
}

/// The lengths formats, in the core's order (`LengthsFormat::ALL`): each name, and whether the
/// core reads it (Python reads the others, with pyarrow).
pub(crate) fn lengths_formats() -> Vec<super::ffi::LengthsFormatInfo> {
    bload::LengthsFormat::ALL
        .iter()
        .map(|format| super::ffi::LengthsFormatInfo {
            name: format.name().into(),
            read_by_core: format.read_by_core(),
        })
        .collect()
}
