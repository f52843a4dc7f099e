//! `bload sweep` estimates its work before it plans: a sweep that would run for minutes is
//! refused at once, naming the flags and `--force`, which runs it anyway.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::cli_support;
use cli_support::{bload, AG};

#[test]
fn a_sweep_of_minutes_is_refused_at_once_without_force() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bload"))
        .args(["sweep", "--lengths", AG, "--t-max", "1..16777216"])
        .args(["--points", "1000"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    // It used to plan for about 17 minutes: a few seconds are the estimate's and the file's.
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the sweep was not refused: still planning after 20 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let err = String::from_utf8(output.stderr).unwrap();
    assert!(
        err.starts_with("bload: error: --t-max 1..16777216 --points 1000 = about "),
        "{err}"
    );
    assert!(
        err.trim_end().ends_with(
            "expected at most 2000000000 (about a minute): fewer --points, a narrower --t-max, \
             or --force to run it anyway"
        ),
        "{err}"
    );
    // --force is taken (here by a sweep small enough to need none).
    let out = bload("sweep --lengths AG --t-max 94..99 --force --json");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = bload("stats --lengths AG --t-max 94 --force");
    assert_eq!(out.status.code(), Some(2), "--force is sweep's alone");
}
