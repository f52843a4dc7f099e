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

/// The read_ahead option's default and its most (the core's `READ_AHEAD`, `MAX_READ_AHEAD`).
pub(crate) fn read_ahead_bounds() -> Vec<i64> {
    vec![bload::READ_AHEAD as i64, bload::MAX_READ_AHEAD as i64]
}

/// An item pool's default items a worker and its most workers (the core's `ITEMS_PER_WORKER`,
/// `MAX_POOL_WORKERS`).
pub(crate) fn item_pool_bounds() -> Vec<i64> {
    vec![
        bload::ITEMS_PER_WORKER as i64,
        bload::MAX_POOL_WORKERS as i64,
    ]
}

/// The page-aligned byte ranges of a field file that a block table's pieces read (the core's
/// `store_read_ranges`), as flat (start, length) pairs, for read-ahead advice.
pub(crate) fn store_read_ranges(
    offsets: &[i64],
    step_bytes: i64,
    file_bytes: i64,
    table: &[i64],
    page: i64,
) -> Result<Vec<i64>, BridgeError> {
    guarded("store_read_ranges", || {
        let size = |name: &str, value: i64| {
            u64::try_from(value)
                .map_err(|_| bload::Error::invalid(name, value, "a size of at least 0"))
        };
        let ranges = bload::store_read_ranges(
            offsets,
            size("step_bytes", step_bytes)?,
            size("file_bytes", file_bytes)?,
            table,
            size("page", page)?,
        )?;
        // Every range lies in a file of file_bytes (an i64), so each fits in an i64.
        Ok(ranges
            .into_iter()
            .flat_map(|(start, length)| [start as i64, length as i64])
            .collect())
    })
}
