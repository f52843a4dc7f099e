//! Shared plan files (src/plan/shared) that are not what their readers expect: a file changed in
//! place after it was mapped, a FIFO at a plan's name, another job's plan in the same directory
//! and a file short of what its header says. Each is an error naming the file and the field,
//! never another plan's batches, a SIGBUS or a hang.

#![cfg(target_os = "linux")]

use bload::{Options, Planner};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::within;
use within::within;

const WAIT: Duration = Duration::from_secs(2);

fn dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("shared_plan_faults")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn options() -> Options {
    let mut options = Options::new(64);
    options.seed = 5;
    options
}

fn lengths(count: u32, salt: u32) -> Vec<u32> {
    (0..count).map(|i| 1 + (i * 7919 + salt) % 61).collect()
}

fn truncate(path: &Path, len: u64) {
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.set_len(len).unwrap();
}

#[test]
fn a_plan_file_truncated_in_place_while_mapped_is_an_error_not_other_batches() {
    // Within one page: the mapping reads zeros past the file's end, which were served as
    // batches. Across pages: a read past the last page was a SIGBUS.
    for (name, count) in [("one_page", 12), ("pages", 5000)] {
        let dir = dir(name);
        let planner = Planner::new(lengths(count, 0), options()).unwrap();
        let path = planner.write_shared_plan(0, &dir).unwrap();
        let size = std::fs::metadata(&path).unwrap().len();
        assert_eq!(size < 4096, count == 12, "{name}: {size} bytes");
        let plan = planner.map_shared_plan(0, &dir, WAIT).unwrap();
        let planner = planner.with_lengths_of(&plan).unwrap();
        assert!(plan.batch(0, 0).is_ok());
        truncate(&path, 64);
        let err = plan.batch(0, 0).map(|batch| batch.table()).unwrap_err();
        assert_eq!(
            err.argument,
            format!("shared plan file {} (size)", path.display()),
            "{name}"
        );
        assert_eq!(err.value, "64 bytes now");
        assert!(
            err.expected
                .starts_with(&format!("{size} bytes, its size when it was mapped")),
            "{err}"
        );
        assert!(plan.rank_batches(0).is_err(), "{name}");
        // The planner's lengths are the file's: planning from them is refused too.
        let err = planner.plan(1).unwrap_err();
        assert_eq!(err.value, "64 bytes now", "{name}");
    }
}

#[test]
fn a_fifo_at_a_plan_files_name_is_refused_without_blocking() {
    let dir = dir("fifo");
    let path = Planner::shared_plan_path(&dir, &options(), 0);
    let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let planner = Planner::new(lengths(12, 0), options()).unwrap();
    let reader = dir.clone();
    let err = within("map_shared_plan of a FIFO", move || {
        planner.map_shared_plan(0, &reader, WAIT).map(|_| ())
    })
    .unwrap_err();
    assert_eq!(
        err.argument,
        format!("shared plan file {} (file type)", path.display())
    );
    assert_eq!(err.value, "a FIFO");
    let reader = dir.clone();
    let err = within("from_shared_plan of a FIFO", move || {
        Planner::from_shared_plan(options(), 0, &reader, WAIT).map(|_| ())
    })
    .unwrap_err();
    assert_eq!(err.value, "a FIFO");
}

#[test]
fn another_jobs_plan_in_the_directory_is_refused_by_a_rank_that_knows_its_lengths_hash() {
    let dir = dir("two_jobs");
    let ours = Planner::new(lengths(40, 0), options()).unwrap();
    let theirs = Planner::new(lengths(40, 3), options()).unwrap();
    assert_ne!(ours.lengths_hash(), theirs.lengths_hash());
    // The other job, under the same options, wrote last.
    theirs.write_shared_plan(0, &dir).unwrap();
    let err = ours.map_shared_plan(0, &dir, WAIT).unwrap_err();
    assert!(err.argument.ends_with("(lengths)"), "{err}");
    let hash = ours.lengths_hash();
    let err = Planner::from_shared_plan_of(options(), hash, 0, &dir, WAIT).unwrap_err();
    assert!(err.argument.ends_with("(lengths)"), "{err}");
    assert_eq!(
        err.value,
        format!("lengths of hash {:#018x}", theirs.lengths_hash())
    );
    assert!(err.expected.contains(&format!("{hash:#018x}")), "{err}");
    // Its own job's file is served, as from_shared_plan serves it.
    ours.write_shared_plan(0, &dir).unwrap();
    let (planner, plan) = Planner::from_shared_plan_of(options(), hash, 0, &dir, WAIT).unwrap();
    assert_eq!(planner.lengths_hash(), hash);
    assert_eq!(plan.hash(), ours.plan(0).unwrap().hash());
}

#[test]
fn a_plan_file_short_of_its_header_says_both_sizes() {
    let dir = dir("short");
    let planner = Planner::new(lengths(200, 0), options()).unwrap();
    let path = planner.write_shared_plan(0, &dir).unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    truncate(&path, size - 8);
    let err = planner.map_shared_plan(0, &dir, WAIT).unwrap_err();
    assert_eq!(
        err.argument,
        format!("shared plan file {} (size)", path.display())
    );
    assert_eq!(err.value, format!("{} bytes", size - 8));
    assert_eq!(err.expected, format!("{size} bytes, what its header says"));
}
