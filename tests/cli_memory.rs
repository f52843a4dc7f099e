//! The `bload` command line short of memory: under a cap on its address space, input too large
//! for it is an error naming what was being built and how large, never an abort. Every command
//! and policy is run under caps rising a mebibyte at a time, from the least bload starts with to
//! what the plan needs, so that each allocation that grows with the input fails at some cap.

#![cfg(target_os = "linux")]

use crate::common::hard_sets;

use bload::Policy;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

/// Runs bload on `args` with its address space capped at `bytes`; its stdout is discarded.
fn bload_capped(bytes: u64, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_bload"));
    command.args(args).stdout(Stdio::null());
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
    // 20 million lengths (40 MB of text, 80 MB as integers) under a cap of 64 MiB: the text is
    // parsed as it is read, and the lengths, given room for as many as its size can hold (a
    // digit and a line end each), find none.
    let text: Vec<u8> = (0..20_000_000u32)
        .flat_map(|i| [b'1' + (i % 9) as u8, b'\n'])
        .collect();
    let path = lengths_file("twenty_million.lengths", &text);
    let name = path.to_str().unwrap();
    let output = bload_capped(64 << 20, &["stats", "--lengths", name, "--t-max", "94"]);
    std::fs::remove_file(&path).unwrap();
    assert_error(
        &output,
        &format!(
            "memory for the lengths of {name} = 20000001 elements of 4 bytes (80000004 bytes): \
             expected that much free memory; the allocation failed (out of memory)"
        ),
    );
}

const MIB: u64 = 1 << 20;

/// 200,000 lengths from 7 to 94 steps (most near 31, a long tail), written once for all tests:
/// planned in a few milliseconds, and in about 20 MiB at most.
fn generated_lengths() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| {
        let lengths = hard_sets::hard_set(200_000, 94, hard_sets::Shape::Lognormal, 26);
        let text: String = lengths.iter().map(|length| format!("{length}\n")).collect();
        let path = lengths_file("generated_200k.lengths", text.as_bytes());
        path.to_str().unwrap().to_string()
    })
}

/// The least cap, in whole mebibytes, under which bload starts and plans two sequences (which
/// depends on the build and the machine, not on bload's allocations).
fn least_cap() -> u64 {
    static LEAST: OnceLock<u64> = OnceLock::new();
    *LEAST.get_or_init(|| {
        let path = lengths_file("two.lengths", b"5\n3\n");
        let args = ["stats", "--lengths", path.to_str().unwrap(), "--t-max", "8"];
        (1..=256)
            .map(|mib| mib * MIB)
            .find(|&cap| bload_capped(cap, &args).status.success())
            .expect("bload runs in 256 MiB")
    })
}

/// Runs bload on `args` under caps from the least it starts with, a mebibyte more each time,
/// until it succeeds: every run before must end with status 1 and the error of an allocation
/// that failed, naming what was being built and its size (never a signal, as an abort is), and
/// there must be such runs. Returns what they named.
fn short_of_memory(args: &[&str]) -> Vec<String> {
    let mut named = Vec::new();
    for cap in (least_cap()..).step_by(MIB as usize).take(64) {
        let output = bload_capped(cap, args);
        let err = String::from_utf8_lossy(&output.stderr);
        match output.status.code() {
            Some(0) => {
                assert!(!named.is_empty(), "{args:?}: no cap was short of memory");
                return named;
            }
            Some(1) => named.push(out_of_memory(&err).unwrap_or_else(|| {
                panic!("{args:?} under {} MiB: not out of memory: {err}", cap / MIB)
            })),
            _ => panic!(
                "{args:?} under {} MiB: {} (not an error): {err}",
                cap / MIB,
                output.status
            ),
        }
    }
    panic!("{args:?}: still short of memory 64 MiB past the least cap");
}

/// What an out-of-memory error names (`memory for WHAT = SIZE: expected ...`), if `err` is one.
fn out_of_memory(err: &str) -> Option<String> {
    let expected = ": expected that much free memory; the allocation failed (out of memory)\n";
    let rest = err
        .strip_prefix("bload: error: memory for ")?
        .strip_suffix(expected)?;
    let (what, size) = rest.split_once(" = ")?;
    let bytes = size
        .strip_suffix(" bytes)")
        .or_else(|| size.strip_suffix(" bytes"))?;
    let digits = bytes.rsplit(['(', ' ']).next()?;
    (!what.is_empty() && digits.parse::<u64>().is_ok()).then(|| what.to_string())
}

#[test]
fn stats_short_of_memory_names_what_it_was_building() {
    let lengths = generated_lengths();
    let args = [
        "stats",
        "--lengths",
        lengths,
        "--t-max",
        "64",
        "--split",
        "--world-size",
        "2",
        "--json",
    ];
    let named = short_of_memory(&args);
    assert!(
        named.iter().any(|what| what.starts_with("the lengths of ")),
        "{named:?}"
    );
}

/// `plan` of `policy`, with split sequences, two ranks and three blocks per batch.
fn plan_short_of_memory(policy: Policy) -> Vec<String> {
    let args = [
        "plan",
        "--lengths",
        generated_lengths(),
        "--t-max",
        "64",
        "--split",
        "--world-size",
        "2",
        "--blocks-per-batch",
        "3",
        "--rank",
        "1",
        "--policy",
        policy.name(),
    ];
    short_of_memory(&args)
}

#[test]
fn plan_short_of_memory_names_what_it_was_building_best_fit() {
    plan_short_of_memory(Policy::BestFit);
}

#[test]
fn plan_short_of_memory_names_what_it_was_building_random_fill() {
    plan_short_of_memory(Policy::RandomFill);
}

#[test]
fn plan_short_of_memory_names_what_it_was_building_pad_to_max() {
    plan_short_of_memory(Policy::PadToMax);
}

#[test]
fn plan_short_of_memory_names_what_it_was_building_lanes() {
    let named = plan_short_of_memory(Policy::Lanes);
    // Issue 26's abort was a lanes plan growing its split pieces one by one.
    assert!(
        named
            .iter()
            .any(|what| what == "the pieces of split sequences"),
        "{named:?}"
    );
}

#[test]
fn sweep_short_of_memory_names_what_it_was_building() {
    let lengths = generated_lengths();
    let args = [
        "sweep",
        "--lengths",
        lengths,
        "--t-max",
        "16..94",
        "--split",
        "--points",
        "3",
        "--json",
    ];
    short_of_memory(&args);
}

#[test]
fn out_of_memory_errors_are_told_from_others() {
    let err = "bload: error: memory for the plan's blocks = 4 elements of 8 bytes (32 bytes): \
               expected that much free memory; the allocation failed (out of memory)\n";
    assert_eq!(out_of_memory(err).as_deref(), Some("the plan's blocks"));
    let bytes = "bload: error: memory for the text of x = 9 bytes: expected that much free \
                 memory; the allocation failed (out of memory)\n";
    assert_eq!(out_of_memory(bytes).as_deref(), Some("the text of x"));
    assert_eq!(
        out_of_memory("bload: error: t_max = 0: expected at least 1\n"),
        None
    );
}
