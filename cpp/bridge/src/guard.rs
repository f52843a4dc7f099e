//! How every bridge call meets C++: a core error becomes a `BridgeError` (cxx turns it into a
//! `rust::Error` exception that the plugin rethrows as `c10::Error`), and a panic is caught
//! before it could unwind into C++ and abort the process.

use bload::Error;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The message of a rejected call, as C++ will see it in `what()`.
#[derive(Debug)]
pub struct BridgeError(String);

impl fmt::Display for BridgeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BridgeError {}

impl BridgeError {
    /// The error of `message`, its NUL bytes written `\0`: C++ reads the message as a C string
    /// (`what()`), which a NUL would end, cutting off the value and what was expected (a path
    /// holding a NUL, named in its error).
    fn of(message: String) -> Self {
        BridgeError(message.replace('\0', "\\0"))
    }
}

/// Runs `body`, turning its error, or a panic (a bug in bload), into an error for C++.
pub(crate) fn guarded<T>(
    call: &str,
    body: impl FnOnce() -> bload::Result<T>,
) -> Result<T, BridgeError> {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(BridgeError::of(error.to_string())),
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".to_string());
            Err(BridgeError::of(format!(
                "internal error in bload ({call}): {message}; please report it"
            )))
        }
    }
}

/// The same, for calls that cannot fail but for a bug: the panic is caught and reported by
/// value, never unwound into C++.
pub(crate) fn infallible<T: Default>(call: &str, body: impl FnOnce() -> T) -> T {
    guarded(call, || Ok(body())).unwrap_or_else(|error| {
        eprintln!("{error}");
        T::default()
    })
}

/// An empty vector with room for `len` elements, or the error that memory for them is lacking
/// (an abort here would take the whole Python or C++ process with it).
pub(crate) fn sized<T>(what: &str, len: usize) -> bload::Result<Vec<T>> {
    let mut vec = Vec::new();
    vec.try_reserve_exact(len)
        .map_err(|_| Error::out_of_memory(what, len, std::mem::size_of::<T>()))?;
    Ok(vec)
}
