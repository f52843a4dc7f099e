//! The sequence store across the bridge: the core's checked layout (`bload::open_store`) as the
//! shared `StoreInfo`, for C++'s `bload::SequenceStore` and, as JSON, for Python's (through the
//! `open_store` operator). Neither language reads a store's header or offsets itself.

use crate::ffi::{StoreFieldInfo, StoreInfo};
use crate::guard::{guarded, BridgeError};

pub(crate) fn open_sequence_store(path: &str) -> Result<StoreInfo, BridgeError> {
    guarded("open_sequence_store", || {
        let layout = bload::open_store(std::path::Path::new(path))?;
        // Every size below is a checked file's, so each fits in an i64.
        let fields: Vec<StoreFieldInfo> = layout
            .fields
            .iter()
            .map(|field| StoreFieldInfo {
                name: field.name.clone(),
                dtype: field.dtype.clone(),
                shape: field.shape.iter().map(|&d| d as i64).collect(),
                path: field.path.display().to_string(),
                step_bytes: field.step_bytes as i64,
                bytes: field.bytes as i64,
            })
            .collect();
        let layout_json = layout.to_json();
        Ok(StoreInfo {
            count: layout.count as i64,
            steps: layout.steps as i64,
            fields,
            offsets: layout.offsets,
            layout_json,
        })
    })
}
