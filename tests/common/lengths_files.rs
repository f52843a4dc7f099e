//! Lengths files of the binary formats, written byte by byte for the readers' tests
//! (lengths_formats.rs, lengths_input.rs).

/// A `.npy` of `version` (1, 2 or 3) with the given header dict and data.
pub fn npy(version: u8, dict: &str, data: &[u8]) -> Vec<u8> {
    let mut header = dict.to_string();
    header.push('\n');
    let mut bytes = b"\x93NUMPY".to_vec();
    bytes.extend([version, 0]);
    if version == 1 {
        bytes.extend((header.len() as u16).to_le_bytes());
    } else {
        bytes.extend((header.len() as u32).to_le_bytes());
    }
    bytes.extend(header.as_bytes());
    bytes.extend(data);
    bytes
}

pub fn dict(descr: &str, shape: &str) -> String {
    format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}")
}

/// A Megatron `.idx` of `version` with these lengths (one document per sequence).
pub fn idx(version: u64, lengths: &[i32]) -> Vec<u8> {
    let mut bytes = b"MMIDIDX\x00\x00".to_vec();
    bytes.extend(version.to_le_bytes());
    bytes.push(4);
    bytes.extend((lengths.len() as u64).to_le_bytes());
    bytes.extend((lengths.len() as u64 + 1).to_le_bytes());
    for length in lengths {
        bytes.extend(length.to_le_bytes());
    }
    let mut pointer = 0i64;
    for length in lengths {
        bytes.extend(pointer.to_le_bytes());
        pointer += 4 * i64::from(*length);
    }
    for document in 0..=lengths.len() as i64 {
        bytes.extend(document.to_le_bytes());
    }
    bytes
}
