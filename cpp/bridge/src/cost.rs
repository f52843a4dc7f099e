//! The `cost` option for C++: names checked and written by the core (`bload::Cost`), and the
//! int64 the DDP agreement compares.

use super::guard::{guarded, BridgeError};

pub(crate) fn cost_code(name: &str) -> Result<i64, BridgeError> {
    guarded("cost_code", || Ok(name.parse::<bload::Cost>()?.code()))
}

pub(crate) fn cost_of_code(code: i64) -> Result<String, BridgeError> {
    guarded("cost_of_code", || {
        Ok(bload::Cost::from_code(code)?.to_string())
    })
}
