//! The core's binary lengths readers on files written byte by byte here: `.npy` of every integer
//! dtype, byte order and header version, Megatron `.idx`, the cache writer's round trip, the
//! dispatcher (magic before extension) and each bad file's error (file, format, expectation).
//! tests/python/test_lengths_readers.py checks the same readers against NumPy's own writer.

use bload::{detect_format, read_lengths, read_lengths_as, write_npy, LengthsFormat, NpyDtype};
use std::path::PathBuf;

use crate::common::lengths_files;
use lengths_files::{dict, idx, npy};

fn file(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("lengths_formats");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn npy_of_every_integer_dtype_order_and_version() {
    let values: [u64; 4] = [1, 7, 100, 127];
    for size in [1usize, 2, 4, 8] {
        for kind in ['i', 'u'] {
            for big in [false, true] {
                if size == 1 && big {
                    continue;
                }
                let order = if size == 1 {
                    '|'
                } else if big {
                    '>'
                } else {
                    '<'
                };
                let mut data = Vec::new();
                for value in values {
                    let bytes = value.to_le_bytes();
                    let mut element = bytes[..size].to_vec();
                    if big {
                        element.reverse();
                    }
                    data.extend(element);
                }
                for version in [1, 2, 3] {
                    let descr = format!("{order}{kind}{size}");
                    let name = format!("v{version}_{kind}{size}_{big}.npy");
                    let path = file(&name, &npy(version, &dict(&descr, "(4,)"), &data));
                    assert_eq!(read_lengths(&path).unwrap(), vec![1, 7, 100, 127], "{name}");
                }
            }
        }
    }
}

#[test]
fn npy_refusals_name_the_file_and_what_was_expected() {
    let four = [1u8, 0, 0, 0, 2, 0, 0, 0];
    for (name, bytes, value) in [
        (
            "float.npy",
            npy(1, &dict("<f4", "(2,)"), &four),
            "dtype \"<f4\"",
        ),
        (
            "bool.npy",
            npy(1, &dict("|b1", "(2,)"), &[1, 1]),
            "dtype \"|b1\"",
        ),
        (
            "matrix.npy",
            npy(1, &dict("<i4", "(1, 2)"), &four),
            "an array of 2-D shape [1, 2]",
        ),
        (
            "fortran.npy",
            npy(
                1,
                "{'descr': '<i4', 'fortran_order': True, 'shape': (2,), }",
                &four,
            ),
            "an array in Fortran order",
        ),
        (
            "short.npy",
            npy(1, &dict("<i4", "(3,)"), &four),
            "a truncated .npy file",
        ),
        (
            "long.npy",
            npy(1, &dict("<i4", "(1,)"), &four),
            "more data than its shape says",
        ),
        (
            "v4.npy",
            npy(4, &dict("<i4", "(2,)"), &four),
            "format version 4.0",
        ),
        (
            "header.npy",
            b"\x93NUMPY\x01\x00\xff".to_vec(),
            "a truncated .npy file",
        ),
    ] {
        let path = file(name, &bytes);
        let err = read_lengths(&path).unwrap_err();
        assert_eq!(err.argument, path.display().to_string(), "{name}");
        assert_eq!(err.value, value, "{name}");
        assert!(err.to_string().contains(".npy"), "{name}: {err}");
    }
    let negative = npy(1, &dict("<i2", "(2,)"), &[3, 0, 0xfe, 0xff]);
    let path = file("negative.npy", &negative);
    let err = read_lengths(&path).unwrap_err();
    assert_eq!(err.argument, format!("{}[1]", path.display()));
    assert_eq!(err.value, "-2 (not positive)");
    let wide = npy(1, &dict("<u8", "(1,)"), &(1u64 << 32).to_le_bytes());
    let err = read_lengths(&file("wide.npy", &wide)).unwrap_err();
    assert_eq!(err.value, "4294967296 (too large)");
}

#[test]
fn idx_lengths_and_its_refusals() {
    let path = file("ok.idx", &idx(1, &[5, 1, 300]));
    assert_eq!(read_lengths(&path).unwrap(), vec![5, 1, 300]);

    let path = file("v2.idx", &idx(2, &[5]));
    let err = read_lengths(&path).unwrap_err();
    assert_eq!(err.argument, path.display().to_string());
    assert_eq!(err.value, "a Megatron .idx of version 2");
    assert_eq!(err.expected, "a Megatron .idx of version 1");

    let whole = idx(1, &[5, 1, 300]);
    for cut in [whole.len() - 1, 40, 20] {
        let path = file(&format!("cut{cut}.idx"), &whole[..cut]);
        let err = read_lengths(&path).unwrap_err();
        assert_eq!(err.argument, path.display().to_string(), "cut at {cut}");
        assert!(err.value.starts_with("a truncated"), "cut at {cut}: {err}");
        assert!(
            err.to_string().contains("Megatron .idx"),
            "cut at {cut}: {err}"
        );
    }
    let err = read_lengths(&file("zero.idx", &idx(1, &[5, 0]))).unwrap_err();
    assert!(err.argument.ends_with("zero.idx[1]"), "{err}");
    // A count that no file could hold is refused before anything is allocated.
    let mut huge = idx(1, &[5]);
    huge[18..26].copy_from_slice(&u64::MAX.to_le_bytes());
    let err = read_lengths(&file("huge.idx", &huge)).unwrap_err();
    assert!(err.value.starts_with("a truncated file of"), "{err}");
}

#[test]
fn magic_decides_then_the_extension_then_text() {
    let lengths = npy(
        1,
        &dict("<i8", "(2,)"),
        &[3, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0],
    );
    let disguised = file("lengths.txt", &lengths);
    assert_eq!(detect_format(&disguised).unwrap(), LengthsFormat::Npy);
    assert_eq!(read_lengths(&disguised).unwrap(), vec![3, 4]);
    let text = file("plain.npy", b"3\n4\n");
    assert_eq!(detect_format(&text).unwrap(), LengthsFormat::Npy);
    let err = read_lengths(&text).unwrap_err();
    assert_eq!(err.value, "a file without the \\x93NUMPY magic");
    // Forced to text, it reads.
    assert_eq!(
        read_lengths_as(&text, Some(LengthsFormat::Text)).unwrap(),
        vec![3, 4]
    );
    assert_eq!(
        detect_format(&file("a.lengths", b"3\n")).unwrap(),
        LengthsFormat::Text
    );
    for (name, head, format) in [
        ("t.parquet", &b"PAR1xxxx"[..], "parquet"),
        ("t.bin", &b"ARROW1\x00\x00"[..], "arrow"),
        ("t.data", &b"\xff\xff\xff\xff\x10\x00"[..], "arrow"),
    ] {
        let path = file(name, head);
        assert_eq!(detect_format(&path).unwrap().name(), format);
        let err = read_lengths(&path).unwrap_err();
        let value = if format == "arrow" {
            "an Arrow IPC file"
        } else {
            "a Parquet file"
        };
        assert_eq!(err.value, value);
        assert!(err.expected.contains("python -m bload lengths"), "{err}");
    }
}

#[test]
fn the_cache_round_trips_in_both_dtypes() {
    let lengths = vec![1, 94, 65536, i32::MAX as u32];
    for dtype in [NpyDtype::Int32, NpyDtype::Int64] {
        let path = file(&format!("cache_{dtype:?}.npy"), b"");
        write_npy(&path, &lengths, dtype).unwrap();
        assert_eq!(read_lengths(&path).unwrap(), lengths);
        let bytes = std::fs::read(&path).unwrap();
        // NumPy aligns the data to 64 bytes.
        let header = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        assert_eq!((10 + header) % 64, 0);
    }
    let path = file("cache_wide.npy", b"");
    let err = write_npy(&path, &[3, u32::MAX], NpyDtype::Int32).unwrap_err();
    assert_eq!(err.argument, "lengths[1]");
    write_npy(&path, &[3, u32::MAX], NpyDtype::Int64).unwrap();
    assert_eq!(read_lengths(&path).unwrap(), vec![3, u32::MAX]);
}

/// `bload ARGS`: its status, stdout and stderr.
fn bload(args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_bload"))
        .args(args)
        .output()
        .unwrap();
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).unwrap();
    (out.status.success(), text(out.stdout), text(out.stderr))
}

#[test]
fn the_cli_plans_from_any_format_and_writes_the_cache() {
    let text = file("cli.lengths", b"3\n5\n9\n");
    let idx_file = file("cli.idx", &idx(1, &[3, 5, 9]));
    let cache = file("cli_cache.npy", b"");
    let (ok, out, err) = bload(&[
        "lengths",
        text.to_str().unwrap(),
        "--out",
        cache.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("3 lengths (17 steps)") && out.contains("as int64"),
        "{out}"
    );
    let plan = |path: &PathBuf, extra: &[&str]| {
        let mut args = vec![
            "plan",
            "--lengths",
            path.to_str().unwrap(),
            "--t-max",
            "10",
            "--rank",
            "0",
            "--json",
        ];
        args.extend(extra);
        bload(&args)
    };
    let (_, from_text, _) = plan(&text, &[]);
    for path in [&cache, &idx_file] {
        let (ok, from_binary, err) = plan(path, &[]);
        assert!(ok, "{err}");
        assert_eq!(from_binary, from_text, "{}", path.display());
    }
    // Forced to text, the .npy is refused as text, naming its first line.
    let (ok, _, err) = plan(&cache, &["--lengths-format", "text"]);
    assert!(!ok && err.contains("cli_cache.npy"), "{err}");
    let (ok, _, err) = plan(&text, &["--lengths-format", "csv"]);
    assert!(!ok && err.contains("--lengths-format = \"csv\""), "{err}");
    let parquet = file("cli.parquet", b"PAR1....");
    let (ok, _, err) = bload(&[
        "lengths",
        parquet.to_str().unwrap(),
        "--column",
        "ids",
        "--out",
        "x.npy",
    ]);
    assert!(!ok && err.contains("python -m bload lengths"), "{err}");
    let (ok, _, err) = bload(&[
        "lengths",
        text.to_str().unwrap(),
        "--column",
        "ids",
        "--out",
        "x.npy",
    ]);
    assert!(!ok && err.contains("--column"), "{err}");
    let (ok, _, err) = bload(&[
        "lengths",
        text.to_str().unwrap(),
        "--out",
        cache.to_str().unwrap(),
        "--dtype",
        "f4",
    ]);
    assert!(!ok && err.contains("--dtype = \"f4\""), "{err}");
}
