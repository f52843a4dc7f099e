//! Lengths files that are not plain regular files, or whose contents lie about themselves: a
//! pipe, a FIFO and an endless device are opened and read once (the bytes that choose the format
//! are parsed with the rest), a Megatron `.idx` must agree with its own arrays, and a `.npy`
//! header's claim is checked against the file's size. Each bad file is an error naming it.

#![cfg(unix)]

use bload::{read_lengths, read_lengths_as, LengthsFormat};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::common::within;
use std::process::{Command, Stdio};
use within::within;

use crate::common::lengths_files;
use lengths_files::{dict, idx, npy};

fn dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("lengths_input");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn file(name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir().join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn int64_npy(lengths: &[u64]) -> Vec<u8> {
    let data: Vec<u8> = lengths.iter().flat_map(|l| l.to_le_bytes()).collect();
    let shape = format!("({},)", lengths.len());
    npy(1, &dict("<i8", &shape), &data)
}

/// `bload ARGS` with `input` on its stdin (a pipe): status, stdout, stderr.
fn bload_piped(args: &[&str], input: Vec<u8>) -> (bool, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bload"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // Written from a thread: a pipe holds 64 KiB, and bload may stop reading at an error.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let output = within("bload on a pipe", move || child.wait_with_output().unwrap());
    writer.join().unwrap();
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).unwrap();
    (
        output.status.success(),
        text(output.stdout),
        text(output.stderr),
    )
}

#[test]
fn lengths_piped_to_stdin_are_read_from_their_first_byte() {
    let text: String = (1..=40).map(|i| format!("{i}\n")).collect();
    let repeated = b"12345\n12345\n12345\n12345\n".to_vec();
    let binary = int64_npy(&[3, 5, 9, 70_000]);
    let cases: [(&str, Vec<u8>, Vec<u32>); 3] = [
        ("text", text.into_bytes(), (1..=40).collect()),
        ("repeated", repeated, vec![12345; 4]),
        ("npy", binary, vec![3, 5, 9, 70_000]),
    ];
    for (name, bytes, expected) in cases {
        let out = dir().join(format!("piped_{name}.npy"));
        let args = ["lengths", "/dev/stdin", "--out", out.to_str().unwrap()];
        let (ok, stdout, stderr) = bload_piped(&args, bytes);
        assert!(ok, "{name}: {stderr}");
        let steps: u64 = expected.iter().map(|&l| u64::from(l)).sum();
        let said = format!("{} lengths ({steps} steps) from /dev/stdin", expected.len());
        assert!(stdout.contains(&said), "{name}: {stdout}");
        assert_eq!(read_lengths(&out).unwrap(), expected, "{name}");
    }
    // The planner sees every sequence: 40 of 820 steps, not 32 of 784.
    let text: String = (1..=40).map(|i| format!("{i}\n")).collect();
    let args = [
        "stats",
        "--lengths",
        "/dev/stdin",
        "--t-max",
        "100",
        "--json",
    ];
    let (ok, stdout, stderr) = bload_piped(&args, text.into_bytes());
    assert!(ok, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let pad_to_max = &json["policies"]["pad_to_max"];
    assert_eq!(pad_to_max["blocks"], 40, "{json}");
    assert_eq!(pad_to_max["padding"], 40 * 100 - 820, "{json}");
}

/// A FIFO at `name` whose writer (a thread) writes `bytes` once a reader opens it.
fn fifo(name: &str, bytes: Vec<u8>) -> PathBuf {
    let path = dir().join(name);
    let _ = std::fs::remove_file(&path);
    let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let writer_path = path.clone();
    std::thread::spawn(move || {
        // Blocks until the reader opens it; a reader that closes early ends the writes.
        if let Ok(mut writer) = std::fs::OpenOptions::new().write(true).open(writer_path) {
            let _ = writer.write_all(&bytes);
        }
    });
    path
}

#[test]
fn a_fifo_of_any_format_is_opened_and_read_once() {
    let cases: [(&str, Vec<u8>, Vec<u32>); 3] = [
        (
            "text.fifo",
            b"7\n8\n9\n10\n11\n".to_vec(),
            vec![7, 8, 9, 10, 11],
        ),
        ("npy.fifo", int64_npy(&[4, 1, 6]), vec![4, 1, 6]),
        ("idx.fifo", idx(1, &[5, 6, 7]), vec![5, 6, 7]),
    ];
    for (name, bytes, expected) in cases {
        let path = fifo(name, bytes);
        let read = within(name, move || read_lengths(&path));
        assert_eq!(read.unwrap(), expected, "{name}");
    }
}

#[test]
fn an_idx_whose_counts_disagree_with_its_arrays_is_refused() {
    // Three lengths written, a count of two: the pointers that follow are read from the third
    // length's bytes, so they cannot be the running offsets.
    let mut short = b"MMIDIDX\x00\x00".to_vec();
    short.extend(1u64.to_le_bytes());
    short.push(4);
    short.extend(2u64.to_le_bytes());
    short.extend(4u64.to_le_bytes());
    for length in [5i32, 6, 7] {
        short.extend(length.to_le_bytes());
    }
    for word in [0i64, 20, 44, 0, 1, 2, 3] {
        short.extend(word.to_le_bytes());
    }
    let path = file("count_too_low.idx", &short);
    let err = read_lengths(&path).unwrap_err();
    assert_eq!(err.argument, format!("{} (pointers[0])", path.display()));
    assert_eq!(err.value, "7");
    assert!(
        err.expected.starts_with("0, the sum of the lengths"),
        "{err}"
    );

    let good = idx(1, &[5, 6, 7]);
    // Pointers in another dtype's bytes (int32's, for a file of uint16 tokens).
    let mut other_dtype = good.clone();
    other_dtype[17] = 8;
    let err = read_lengths(&file("dtype.idx", &other_dtype)).unwrap_err();
    assert!(err.argument.ends_with("dtype.idx (pointers[1])"), "{err}");
    assert_eq!((err.value.as_str(), &err.expected[..3]), ("20", "10,"));
    // The document index: from 0, never down, to the count.
    let documents = 34 + 12 * 3;
    for (at, value, field) in [(0, 1i64, "[0]"), (2, 0, "[2]"), (3, 2, "[3]")] {
        let mut bad = good.clone();
        let at = documents + 8 * at;
        bad[at..at + 8].copy_from_slice(&value.to_le_bytes());
        let err = read_lengths(&file("documents.idx", &bad)).unwrap_err();
        let argument = format!("(document index{field})");
        assert!(err.argument.ends_with(&argument), "{err}");
        assert_eq!(err.value, value.to_string());
    }
    // Longer than its counts (Megatron-Core appends a mode byte a sequence): read as before.
    let mut longer = good;
    longer.extend([1, 1, 1]);
    assert_eq!(
        read_lengths(&file("modes.idx", &longer)).unwrap(),
        [5, 6, 7]
    );
}

#[test]
fn a_npy_too_short_for_its_header_says_so() {
    let expected = "a .npy file of a 1-D integer array";
    let err = read_lengths(&file("empty.npy", b"")).unwrap_err();
    assert!(err.argument.ends_with("empty.npy"), "{err}");
    assert_eq!(err.value, "an empty file (0 bytes)");
    assert!(err.expected.starts_with(expected), "{err}");
    let whole = int64_npy(&[3, 4, 5]);
    for cut in [3, 8, 9, 30] {
        let err = read_lengths(&file("cut_header.npy", &whole[..cut])).unwrap_err();
        assert!(err.argument.ends_with("cut_header.npy"), "{cut}: {err}");
        assert_eq!(err.value, "a truncated .npy file", "{cut}");
    }
    // A shape of 2^60 elements in a file of three: the header's claim, not the memory, is at
    // fault.
    let data: Vec<u8> = [3u64, 4, 5].iter().flat_map(|l| l.to_le_bytes()).collect();
    let huge = npy(1, &dict("<i8", "(1152921504606846976,)"), &data);
    let err = read_lengths(&file("huge.npy", &huge)).unwrap_err();
    assert!(err.argument.ends_with("huge.npy"), "{err}");
    assert_eq!(err.value, "a truncated .npy file");
    assert!(
        err.expected.starts_with(
            "1152921504606846976 elements of 8 bytes after the header, as its shape says (the \
             file has"
        ) && err.expected.ends_with(", 24 after the header)"),
        "{err}"
    );
    assert!(!err.to_string().contains("memory"), "{err}");
}

#[test]
fn an_endless_device_read_as_text_fails_at_its_first_line() {
    for device in ["/dev/zero", "/dev/urandom"] {
        if !Path::new(device).exists() {
            continue;
        }
        let err = within(device, move || {
            read_lengths_as(Path::new(device), Some(LengthsFormat::Text))
        })
        .unwrap_err();
        assert!(err.argument.starts_with(&format!("{device}:")), "{err}");
        assert!(!err.value.contains("0 bytes"), "{err}");
    }
    let err = read_lengths(&file("nul.lengths", b"3\n4\x005\n")).unwrap_err();
    assert!(err.argument.ends_with("nul.lengths:2"), "{err}");
    assert_eq!(err.value, "a NUL byte at column 2 (a binary file?)");
    let long = vec![b'7'; (1 << 20) + 10];
    let err = read_lengths(&file("long.lengths", &long)).unwrap_err();
    assert!(err.argument.ends_with("long.lengths:1"), "{err}");
    assert_eq!(err.value, "a line longer than 1048576 bytes");
    let err = read_lengths(&file("latin1.lengths", b"3\n4 # caf\xe9\n")).unwrap_err();
    assert!(err.argument.ends_with("latin1.lengths:2"), "{err}");
}
