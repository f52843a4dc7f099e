//! The sequence store's checker (`bload::open_store`) on stores written byte by byte here: a good
//! one's layout, and each damage refused naming the file. Python's writer and both readers are
//! checked in tests/python/test_store.py and tests/cpp/store_test.cpp.

use bload::{crc32, open_store};
use std::path::{Path, PathBuf};

fn store(
    name: &str,
    offsets: &[i64],
    data_bytes: usize,
    header_edit: impl Fn(&mut String),
) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("store_layout")
        .join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let words: Vec<u8> = offsets.iter().flat_map(|o| o.to_le_bytes()).collect();
    std::fs::write(dir.join("offsets.bin"), &words).unwrap();
    std::fs::write(dir.join("data.bin"), vec![0u8; data_bytes]).unwrap();
    let mut header = format!(
        r#"{{"format": "bload-sequence-store", "version": 1, "count": {}, "steps": {},
            "offsets_crc32": {}, "fields": [{{"name": "data", "dtype": "float32", "shape": [2],
            "file": "data.bin"}}]}}"#,
        offsets.len() - 1,
        offsets[offsets.len() - 1],
        crc32(&words)
    );
    header_edit(&mut header);
    std::fs::write(dir.join("header.json"), header).unwrap();
    dir
}

fn refusal(dir: &Path) -> bload::Error {
    open_store(dir).expect_err("should be refused")
}

#[test]
fn a_good_store_and_its_layout() {
    let dir = store("good", &[0, 3, 4, 9], 9 * 8, |_| {});
    let layout = open_store(&dir).unwrap();
    assert_eq!((layout.count, layout.steps), (3, 9));
    assert_eq!(layout.offsets, vec![0, 3, 4, 9]);
    let field = &layout.fields[0];
    assert_eq!((field.step_bytes, field.bytes), (8, 72));
    assert_eq!(field.path, dir.join("data.bin"));
    assert!(layout.to_json().contains(r#""dtype":"float32""#));
}

#[test]
fn each_damage_names_its_file() {
    let name = |dir: &Path, file: &str| dir.join(file).display().to_string();
    let dir = store("unordered", &[0, 3, 3, 9], 72, |_| {});
    let err = refusal(&dir);
    assert_eq!(err.argument, name(&dir, "offsets.bin"));
    assert_eq!(err.value, "offsets[1] = 3 then offsets[2] = 3");
    let dir = store("short", &[0, 3, 9], 71, |_| {});
    let err = refusal(&dir);
    assert_eq!(
        (err.argument, err.value),
        (name(&dir, "data.bin"), "a file of 71 bytes".to_string())
    );
    let dir = store("crc", &[0, 3, 9], 72, |h| {
        *h = h.replace("\"offsets_crc32\": ", "\"offsets_crc32\": 1")
    });
    assert!(
        refusal(&dir).expected.contains("the CRC-32 1"),
        "{}",
        refusal(&dir)
    );
    let dir = store("version", &[0, 9], 72, |h| {
        *h = h.replace("\"version\": 1", "\"version\": 2")
    });
    let err = refusal(&dir);
    assert_eq!(
        (err.value.as_str(), err.expected.as_str()),
        ("version 2", "version 1")
    );
    let dir = store("dtype", &[0, 9], 72, |h| {
        *h = h.replace("float32", "complex64")
    });
    assert!(refusal(&dir).value.contains("dtype \"complex64\""));
    let dir = store("escape", &[0, 9], 72, |h| {
        *h = h.replace("\"data.bin\"", "\"../data.bin\"")
    });
    assert_eq!(
        refusal(&dir).expected,
        "a file name in the store and a shape of sizes"
    );
    let dir = store("huge", &[0, 9], 72, |h| {
        *h = h.replace("[2]", "[4294967296, 4294967296]")
    });
    assert_eq!(refusal(&dir).expected, "a field whose size fits in 64 bits");
    let dir = store("json", &[0, 9], 72, |h| h.truncate(20));
    assert!(refusal(&dir).value.starts_with("not JSON"));
}
