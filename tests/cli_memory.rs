//! The `bload` command line short of memory: under a cap on its address space, input too large
//! for it is an error naming what was being built and how large, never an abort.

#![cfg(target_os = "linux")]

use std::io;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs bload on `args` with its address space capped at `bytes`.
fn bload_capped(bytes: u64, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_bload"));
    command.args(args);
    let limit = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: bytes,
    };
    // Between fork and exec, in the child: setrlimit is async-signal-safe.
    unsafe {
        command.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_AS, &limit) == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        });
    }
    command.output().unwrap()
}

fn lengths_file(name: &str, text: &[u8]) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Checks an exit with status 1 and exactly `message` on stderr.
fn assert_error(output: &Output, message: &str) {
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(err, format!("bload: error: {message}\n"));
    assert_eq!(output.status.code(), Some(1), "{err}");
}

const CAP: u64 = 256 << 20;

#[test]
fn a_plan_too_large_for_memory_is_an_error_saying_how_large() {
    // One sequence of 2^32 - 1 steps in blocks of 1: 2^32 - 1 blocks, far past the cap.
    let path = lengths_file("longest.lengths", b"4294967295\n");
    let path = path.to_str().unwrap();
    let blocks = "memory for the plan's blocks = 4294967295 elements of 8 bytes \
                  (34359738360 bytes): expected that much free memory; the allocation failed \
                  (out of memory)";
    for command in [
        &[
            "plan",
            "--lengths",
            path,
            "--t-max",
            "1",
            "--split",
            "--rank",
            "0",
        ][..],
        &["stats", "--lengths", path, "--t-max", "1", "--split"][..],
    ] {
        assert_error(&bload_capped(CAP, command), blocks);
    }
}

#[test]
fn lengths_too_many_for_memory_are_an_error_saying_how_many() {
    // 20 million lengths (40 MB of text, 80 MB as integers) under a cap of 96 MiB: the text is
    // read, the lengths find no room.
    let text: Vec<u8> = (0..20_000_000u32)
        .flat_map(|i| [b'1' + (i % 9) as u8, b'\n'])
        .collect();
    let path = lengths_file("twenty_million.lengths", &text);
    let name = path.to_str().unwrap();
    let output = bload_capped(96 << 20, &["stats", "--lengths", name, "--t-max", "94"]);
    std::fs::remove_file(&path).unwrap();
    assert_error(
        &output,
        &format!(
            "memory for the lengths of {name} = 20000001 elements of 4 bytes (80000004 bytes): \
             expected that much free memory; the allocation failed (out of memory)"
        ),
    );
}
