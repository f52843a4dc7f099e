//! A whole file mapped read-only into memory (libc `mmap`), unmapped when the last column that
//! reads it is dropped. Pages are the page cache's: every process that maps the same file reads
//! the same physical memory, which is what lets the ranks of a node share one plan.

use crate::error::{Error, Result};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

pub(crate) struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is read-only and owned by this value; reading it from any thread is safe.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Mapping {
    /// `file` (at `path`, for errors) mapped whole. An empty file cannot be mapped (and is no
    /// plan file): an error naming it.
    pub(crate) fn of(file: &File, path: &Path) -> Result<Self> {
        let named = |value: String, expected: &str| {
            Error::invalid(
                "shared plan file",
                format!("{} ({value})", path.display()),
                expected,
            )
        };
        let len = file
            .metadata()
            .map_err(|err| named(err.to_string(), "a readable file"))?
            .len();
        let len = usize::try_from(len)
            .map_err(|_| named(format!("{len} bytes"), "a file that fits the address space"))?;
        if len == 0 {
            return Err(named("0 bytes".into(), "a plan file written by bload"));
        }
        // SAFETY: a fresh read-only private mapping of a whole open file; nothing else aliases it.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            let err = std::io::Error::last_os_error();
            return Err(named(
                format!("mmap of {len} bytes: {err}"),
                "a file that can be mapped",
            ));
        }
        Ok(Mapping {
            ptr: ptr.cast(),
            len,
        })
    }

    pub(crate) fn as_ptr(&self) -> *const u8 {
        self.ptr
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: the whole mapping, alive as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `of`, unmapped once. Its failure leaves only address space.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}
