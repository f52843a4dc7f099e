//! Loading `libbload.so` into a `tch` process: its operators and classes register with this
//! process's libtorch, so TorchScript models that call `torch.ops.bload.*` load with
//! `tch::CModule`. A library built for another torch is refused before it is used.

use super::{Error, Result, TORCH_VERSION};
use ::tch::{Device, Kind, Tensor};
use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};

/// `libbload.so`, loaded into this process.
#[derive(Debug, Clone)]
pub struct Plugin {
    pub path: PathBuf,
    /// The torch release the plugin was built against.
    pub torch_version: String,
}

/// Opens `libbload.so` (RTLD_GLOBAL, as `torch.ops.load_library` does), which registers
/// `torch.ops.bload.*` and `torch.classes.bload.*` with this process's libtorch, so that
/// `tch::CModule::load` of a TorchScript model that calls them works. Fails, saying why, when
/// the file is missing, will not load, or was built for another torch than this `tch`'s.
/// Loading the same library twice is harmless; it is never unloaded.
pub fn load_plugin(path: impl AsRef<Path>) -> Result<Plugin> {
    let path = path.as_ref().to_path_buf();
    let fail = |reason: String| Error::Plugin {
        path: path.clone(),
        reason,
    };
    if !path.is_file() {
        return Err(fail(
            "no such file: expected libbload.so, which `make plugin` builds in build/".into(),
        ));
    }
    let name = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| fail("the path holds a NUL byte".into()))?;
    // Make sure this process's libtorch is loaded before the plugin, which links against it:
    // the plugin then resolves to the same copy rather than to whatever the loader finds.
    let _ = Tensor::zeros([1], (Kind::Float, Device::Cpu));
    // SAFETY: `name` is a valid C string; dlopen runs the library's static initialisers, which
    // register its operators with libtorch.
    let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if handle.is_null() {
        let reason = last_dl_error();
        let hint = if reason.contains("undefined symbol") {
            format!(" (built against another torch than this process's {TORCH_VERSION}?)")
        } else {
            String::new()
        };
        return Err(fail(format!("cannot be loaded: {reason}{hint}")));
    }
    // SAFETY: the symbol, where present, is `const char* bload_torch_version()`.
    let symbol = unsafe { libc::dlsym(handle, c"bload_torch_version".as_ptr()) };
    if symbol.is_null() {
        return Err(fail(
            "has no bload_torch_version(): expected a libbload.so of this bload release".into(),
        ));
    }
    let version_of: extern "C" fn() -> *const libc::c_char = unsafe { std::mem::transmute(symbol) };
    // SAFETY: it returns a static NUL-terminated string.
    let torch_version = unsafe { CStr::from_ptr(version_of()) }
        .to_string_lossy()
        .into_owned();
    check_release(&torch_version).map_err(fail)?;
    Ok(Plugin {
        path,
        torch_version,
    })
}

/// Whether a plugin built against torch `version` can share this process with tch.
fn check_release(version: &str) -> std::result::Result<(), String> {
    if release(version) == TORCH_VERSION {
        return Ok(());
    }
    Err(format!(
        "was built against torch {version}: expected torch {TORCH_VERSION}.x, the release this tch binds"
    ))
}

/// "2.13" of "2.13.0+cu130".
fn release(version: &str) -> &str {
    let mut dots = version.match_indices('.');
    match (dots.next(), dots.next()) {
        (Some(_), Some((second, _))) => &version[..second],
        _ => version,
    }
}

fn last_dl_error() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated string valid until the next dl call.
    let error = unsafe { libc::dlerror() };
    if error.is_null() {
        "unknown error".into()
    } else {
        unsafe { CStr::from_ptr(error) }
            .to_string_lossy()
            .into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_is_major_and_minor() {
        assert_eq!(release("2.13.0+cu130"), "2.13");
        assert_eq!(release("2.11.1"), "2.11");
        assert_eq!(release("2"), "2");
    }

    #[test]
    fn a_plugin_for_another_torch_is_refused() {
        assert!(check_release("2.13.1+cu130").is_ok());
        let refused = check_release("2.11.0").unwrap_err();
        assert!(
            refused.contains("built against torch 2.11.0: expected torch 2.13.x"),
            "{refused}"
        );
    }
}
