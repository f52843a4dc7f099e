//! `bload lengths IN --out F`: the cache is renamed over F, so an F that exists must be a regular
//! file (a FIFO, a device or a directory is refused and left as it was), and a failed write names
//! the path the user gave, never the temporary file beside it.

#![cfg(unix)]

use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;
use std::process::Command;

fn dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli_lengths_out");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `bload lengths IN --out out`, IN three lengths: status and stderr.
fn write_cache(out: &str) -> (bool, String) {
    // One input per output: the tests run at once, and a file rewritten while read is short.
    let name = out.replace(['/', '.'], "_");
    let input = dir().join(format!("{name}.lengths"));
    std::fs::write(&input, "3\n4\n5\n").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_bload"))
        .args(["lengths", input.to_str().unwrap(), "--out", out])
        .output()
        .unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    (output.status.success(), stderr)
}

#[test]
fn an_output_that_is_not_a_regular_file_is_refused_and_kept() {
    let fifo = dir().join("out.fifo");
    let _ = std::fs::remove_file(&fifo);
    let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let (ok, err) = write_cache(fifo.to_str().unwrap());
    assert!(!ok);
    assert_eq!(
        err,
        format!(
            "bload: error: --out = {} (a FIFO): expected a regular file to replace, or the path \
             of a new one\n",
            fifo.display()
        )
    );
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    let directory = dir().join("out.d");
    std::fs::create_dir_all(&directory).unwrap();
    let (ok, err) = write_cache(directory.to_str().unwrap());
    assert!(!ok && err.contains("(a directory)"), "{err}");
    // No device node is tried: a bload without this check, run as root, would replace it.
    // A regular file is replaced, as before.
    let file = dir().join("out.npy");
    std::fs::write(&file, b"old").unwrap();
    let (ok, err) = write_cache(file.to_str().unwrap());
    assert!(ok, "{err}");
    assert_eq!(bload::read_lengths(&file).unwrap(), [3, 4, 5]);
}

#[test]
fn a_missing_directory_names_the_path_given() {
    let out = dir().join("no_such_dir").join("x.npy");
    let (ok, err) = write_cache(out.to_str().unwrap());
    assert!(!ok);
    assert_eq!(
        err,
        format!(
            "bload: error: --out = {} (no such directory: {}): expected a path in an existing \
             directory\n",
            out.display(),
            dir().join("no_such_dir").display()
        )
    );
    assert!(!err.contains(".tmp"), "{err}");
}
