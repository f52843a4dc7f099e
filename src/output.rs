//! Output files written whole or not at all: to a temporary file beside the output, synced, then
//! renamed over it, so that a reader never finds half a file and a failed write (a full disk)
//! leaves the old one as it was. A rename replaces whatever has the name, so an output that
//! exists must be a regular file: a device, a FIFO or a directory there is refused before
//! anything is written, never replaced by a file (nor, for a FIFO, written to and waited on).
//! Failures name the option and the path the user gave, not the temporary file.

use crate::error::{Error, Result};
use std::io::{ErrorKind, Write};
use std::path::Path;

/// Writes `path` (given as `option`, which errors name) through `write`, whole: `bytes` is about
/// what it writes, for the message of a full disk.
pub fn write_whole(
    path: &Path,
    option: &str,
    bytes: u64,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    check_output(path, option)?;
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp{}", std::process::id()));
    let temporary = path.with_file_name(name);
    let written = || -> std::io::Result<()> {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&temporary)?);
        write(&mut out)?;
        out.into_inner()
            .map_err(|err| err.into_error())?
            .sync_all()?;
        std::fs::rename(&temporary, path)
    };
    written().map_err(|err| {
        let _ = std::fs::remove_file(&temporary);
        failed(path, option, bytes, &err)
    })
}

/// An output that exists must be a regular file: the rename at the end would replace anything
/// else (a device node, a FIFO) with a file, or fail on a directory after all the writing.
fn check_output(path: &Path, option: &str) -> Result<()> {
    // A link would be replaced by the file, not written through: its target left as it was,
    // as Python's writers refuse it too.
    if std::fs::symlink_metadata(path).is_ok_and(|metadata| metadata.file_type().is_symlink()) {
        return Err(Error::invalid(
            option,
            format!("{} (a symbolic link)", path.display()),
            "a regular file to replace, or the path of a new one (the rename that writes it \
             whole would replace the link, not its target)",
        ));
    }
    // Through a link, to what it names: a link to a device is a device to the user.
    let Ok(metadata) = std::fs::metadata(path) else {
        // A new file (or one out of reach, which the write then names).
        return Ok(());
    };
    if metadata.is_file() {
        return Ok(());
    }
    let what = kind_of(&metadata.file_type());
    Err(Error::invalid(
        option,
        format!("{} ({what})", path.display()),
        "a regular file to replace, or the path of a new one",
    ))
}

/// What a file that is not a regular file is, in words.
fn kind_of(file_type: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_char_device() {
            return "a character device";
        }
        if file_type.is_block_device() {
            return "a block device";
        }
        if file_type.is_fifo() {
            return "a FIFO";
        }
        if file_type.is_socket() {
            return "a socket";
        }
    }
    if file_type.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

/// The error of a write of `bytes` to `path` (through its temporary file) that failed with
/// `err`: it names the option and the path the user gave, and says plainly what a full disk or
/// a missing directory is.
fn failed(path: &Path, option: &str, bytes: u64, err: &std::io::Error) -> Error {
    let (why, expected) = match err.kind() {
        ErrorKind::StorageFull => (
            "no space left on its device".to_string(),
            format!("room for its {bytes} bytes on its file system"),
        ),
        ErrorKind::NotFound => {
            let parent = match path.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => parent,
                _ => Path::new("."),
            };
            (
                format!("no such directory: {}", parent.display()),
                "a path in an existing directory".to_string(),
            )
        }
        _ => (err.to_string(), "a writable file".to_string()),
    };
    Error::invalid(option, format!("{} ({why})", path.display()), expected)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_and_a_missing_directory_name_the_path_given() {
        let path = Path::new("out/cache.npy");
        let full = std::io::Error::from_raw_os_error(libc::ENOSPC);
        let err = failed(path, "--out", 1000, &full);
        assert_eq!(err.argument, "--out");
        assert_eq!(err.value, "out/cache.npy (no space left on its device)");
        assert_eq!(err.expected, "room for its 1000 bytes on its file system");
        let missing = std::io::Error::from_raw_os_error(libc::ENOENT);
        let err = failed(path, "--plot", 1000, &missing);
        assert_eq!(err.argument, "--plot");
        assert_eq!(err.value, "out/cache.npy (no such directory: out)");
        assert_eq!(err.expected, "a path in an existing directory");
    }

    #[test]
    fn a_fifo_or_a_directory_is_refused_before_writing() {
        let dir = std::env::temp_dir().join(format!("bload-output-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let err = write_whole(&dir, "--plot", 1, |_| panic!("written")).unwrap_err();
        assert_eq!(err.argument, "--plot");
        assert!(err.value.ends_with("(a directory)"), "{}", err.value);
        let file = dir.join("chart.svg");
        write_whole(&file, "--plot", 3, |out| out.write_all(b"new")).unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), b"new");
        let link = dir.join("link.svg");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let err = write_whole(&link, "--out", 1, |_| panic!("written")).unwrap_err();
        assert!(err.value.ends_with("(a symbolic link)"), "{}", err.value);
        assert_eq!(std::fs::read(&file).unwrap(), b"new");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
