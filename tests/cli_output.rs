//! The `bload` command line's output when stdout fails: a reader that goes away early ends the
//! command quietly, as it ends Unix tools; any other failed write is an error.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Output, Stdio};

const AG: &str = "examples/data/action_genome_like.lengths";

fn command(line: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_bload"));
    let words = line.split_whitespace();
    command
        .args(words.map(|word| if word == "AG" { AG } else { word }))
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    command
}

/// A pipe whose reading end is already closed: every write to it fails with EPIPE.
fn pipe_without_reader() -> Stdio {
    let mut ends = [0; 2];
    // O_CLOEXEC: other tests' children must not inherit the reading end and keep it open.
    assert_eq!(
        unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) },
        0
    );
    let (reader, writer) =
        unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
    drop(reader);
    Stdio::from(writer)
}

/// Checks that `output` is a quiet success: status 0, nothing on stderr.
fn assert_quiet_success(line: &str, output: &Output) {
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(err.is_empty(), "{line}: {err}");
    assert_eq!(output.status.code(), Some(0), "{line}");
}

/// Everything bload writes for `line`, when all of it is read.
fn full_output(line: &str) -> Vec<u8> {
    let output = command(line).output().unwrap();
    assert!(output.status.success(), "{line}");
    output.stdout
}

#[test]
fn a_reader_that_stops_after_one_line_ends_bload_quietly() {
    for line in [
        "plan --lengths AG --t-max 94 --rank 0",
        "plan --lengths AG --t-max 94 --rank 0 --json",
    ] {
        // More than a pipe holds (64 KiB) and the reader takes, so bload is still writing when
        // the reader goes.
        assert!(full_output(line).len() > 1 << 17, "{line}");
        let mut child = command(line)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut reader = BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        reader.read_line(&mut first).unwrap();
        assert!(first.starts_with(if line.ends_with("--json") {
            "{"
        } else {
            "plan 0x"
        }));
        drop(reader);
        assert_quiet_success(line, &child.wait_with_output().unwrap());
    }
}

#[test]
fn a_pipe_closed_before_anything_is_written_ends_bload_quietly() {
    for line in [
        "stats --lengths AG --t-max 94",
        "stats --lengths AG --t-max 94 --json",
        "plan --lengths AG --t-max 94 --rank 0",
        "plan --lengths AG --t-max 94 --rank 0 --json",
        "sweep --lengths AG --t-max 30..300",
        "sweep --lengths AG --t-max 30..300 --json",
        "--help",
    ] {
        let output = command(line)
            .stdout(pipe_without_reader())
            .output()
            .unwrap();
        assert_quiet_success(line, &output);
    }
}

#[cfg(target_os = "linux")]
#[test]
fn a_full_disk_is_an_error() {
    for line in [
        "stats --lengths AG --t-max 94",
        "plan --lengths AG --t-max 94 --rank 0 --json",
        "sweep --lengths AG --t-max 30..300",
        "--help",
    ] {
        let full = File::options().write(true).open("/dev/full").unwrap();
        let output = command(line).stdout(full).output().unwrap();
        assert_eq!(output.status.code(), Some(1), "{line}");
        let err = String::from_utf8(output.stderr).unwrap();
        assert_eq!(
            err, "bload: error: writing the output: No space left on device (os error 28)\n",
            "{line}"
        );
    }
}
