//! The bundled length sets of `examples/data`, as the tests that plan them read them.

use bload::read_lengths;
use std::path::PathBuf;

/// The lengths of `examples/data/<file>`.
pub fn data(file: &str) -> Vec<u32> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("examples/data")
        .join(file);
    read_lengths(&path).unwrap()
}
