//! A whole file mapped read-only into memory (libc `mmap`), unmapped when the last column that
//! reads it is dropped. Pages are the page cache's: every process that maps the same file reads
//! the same physical memory, which is what lets the ranks of a node share one plan.
//!
//! A mapping does not follow its file: a file truncated in place reads as zeros to the end of
//! its last page (another plan's batches, silently) and past it as SIGBUS. bload never does that
//! (it writes a new file and renames it), but another program may; so the mapping keeps its file
//! open and [`Mapping::check_size`] compares the file's size (fstat) with the mapped one before
//! each read of it that serves a batch or plans an epoch, as the sequence store checks its files.

use super::refused;
use crate::error::{Error, Result};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

pub(crate) struct Mapping {
    ptr: *mut u8,
    len: usize,
    /// The file mapped, kept open to check its size.
    file: File,
    path: PathBuf,
}

// SAFETY: the mapping is read-only and owned by this value; reading it from any thread is safe.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Mapping {
    /// `file` (at `path`, for errors) mapped whole. An empty file cannot be mapped (and is no
    /// plan file): an error naming it.
    pub(crate) fn of(file: File, path: &Path) -> Result<Self> {
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
            file,
            path: path.to_path_buf(),
        })
    }

    /// The mapped file is still as long as it was mapped: else an error naming it, before a
    /// read of the pages it no longer has.
    pub(crate) fn check_size(&self) -> Result<()> {
        let size = self.file.metadata().map(|metadata| metadata.len());
        match size {
            Ok(size) if size == self.len as u64 => Ok(()),
            Ok(size) => Err(refused(
                &self.path,
                "size",
                format!("{size} bytes now"),
                format!(
                    "{} bytes, its size when it was mapped (the file was changed in place while \
                     mapped; bload writes a new file and renames it over the old one)",
                    self.len
                ),
            )),
            Err(err) => Err(refused(&self.path, "size", err, "a file fstat can read")),
        }
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
