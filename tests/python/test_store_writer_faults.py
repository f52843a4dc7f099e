"""The store writer's and check-store's refusals of bad input: field names that are no file of
the store (or another of its files, or outside it), no field, an item's key that no field names,
a field's .npy directory that holds a file the others lack, overwrite=True onto what is not a
store, and check-store on a malformed header (one line, no traceback, as the reader says it);
and steps of no element, which the reader maps, written. Each refusal names the argument and
what was expected, and leaves nothing behind."""

import json
import os
import pathlib
import subprocess
import sys
import zlib

import bload
import numpy as np
import pytest
from conftest import child_env

ITEMS = [
    (np.arange(3, dtype=np.float32), np.arange(3)),
    (np.arange(2, dtype=np.float32), np.arange(2)),
]


@pytest.mark.parametrize(
    "fields, message",
    [
        (("../escaped", "target"), "'../escaped' is not a file name"),
        (("a/b", "target"), "'a/b' is not a file name"),
        (("data", "x\0y"), "'x\\x00y' is not a file name"),
        (("", "target"), "'' is not a file name"),
        (("..", "target"), "'..' is not a file name"),
        (("offsets", "target"), "'offsets' would be the store's own offsets.bin"),
        (("data", "Offsets"), "'Offsets' would be the store's own Offsets.bin"),
        (("data", "data"), "'data' more than once (letter case aside): expected distinct names"),
        (("Data", "data"), "'Data', 'data' more than once (letter case aside)"),
        ((), "fields = (): expected at least one field's name"),
    ],
)
def test_a_field_name_that_is_no_file_of_the_store_is_refused_before_writing(
    tmp_path, fields, message
):
    out = tmp_path / "out"
    out.mkdir()
    items = [item[: len(fields)] for item in ITEMS] if fields else [()]
    with pytest.raises(ValueError) as error:
        bload.store.write(out / "s", items, fields=fields, progress=False)
    assert str(error.value).startswith(f"fields = {fields!r}: ") and message in str(error.value)
    assert "expected" in str(error.value)
    # Nothing written: no store, no temporary directory, nothing beside or above it.
    assert os.listdir(out) == [] and os.listdir(tmp_path) == ["out"]


def test_a_field_name_that_is_not_a_string_is_a_type_error(tmp_path):
    with pytest.raises(TypeError, match=r"fields = \(1, 2\): expected a field's name"):
        bload.store.write(tmp_path / "s", ITEMS, fields=(1, 2), progress=False)
    assert os.listdir(tmp_path) == []


def test_names_the_reader_takes_are_written_and_read_back(tmp_path):
    # header is no file of the store (header.json is); names with dots, as the reader takes them.
    fields = ("header", "a..b", ".hidden")
    items = [(np.arange(3), np.ones(3), np.zeros(3)), (np.arange(2), np.ones(2), np.zeros(2))]
    path = bload.store.write(tmp_path / "s", items, fields=fields, progress=False)
    store = bload.SequenceStore(path, fields=fields, verify=True)
    assert [x.tolist() for x in store[1]] == [[0, 1], [1.0, 1.0], [0.0, 0.0]]
    assert sorted(os.listdir(path)) == sorted(
        ["header.json", "offsets.bin", "header.bin", "a..b.bin", ".hidden.bin"]
    )


def test_an_items_key_that_no_field_names_is_refused(tmp_path):
    items = [{"data": np.ones(3), "target": np.arange(3), "extra": np.zeros(3)}]
    with pytest.raises(
        ValueError,
        match=r"item 0: keys \['extra'\] not among the fields: expected keys \['data', 'target'\]",
    ):
        bload.store.write(tmp_path / "s", items, progress=False)
    assert os.listdir(tmp_path) == []
    # The fields' keys alone, in any order, are written.
    path = bload.store.write(
        tmp_path / "s", [{"target": np.arange(3), "data": np.ones(3)}], progress=False
    )
    assert bload.SequenceStore(path)[0][1].tolist() == [0, 1, 2]


def npy_fields(root, names):
    for field in ("data", "target"):
        (root / field).mkdir(parents=True, exist_ok=True)
        for i, name in enumerate(names):
            np.save(root / field / name, np.arange(i + 2))


def test_a_file_in_one_fields_npy_directory_alone_is_refused(tmp_path):
    npy_fields(tmp_path / "npy", ["0.npy", "1.npy"])
    np.save(tmp_path / "npy" / "target" / "extra.npy", np.arange(5))
    with pytest.raises(
        ValueError,
        match=r"npy/target: \['extra.npy'\] not in .*npy/data: expected the same .npy names",
    ):
        bload.store.write(tmp_path / "s", tmp_path / "npy", progress=False)
    assert not (tmp_path / "s").exists()
    # The other way round, as before: a file of data's that target lacks.
    os.remove(tmp_path / "npy" / "target" / "extra.npy")
    os.remove(tmp_path / "npy" / "target" / "1.npy")
    with pytest.raises(ValueError, match=r"npy/target: \['1.npy'\] missing"):
        bload.store.write(tmp_path / "s", tmp_path / "npy", progress=False)
    assert sorted(os.listdir(tmp_path)) == ["npy"]


def test_a_missing_fields_npy_directory_is_named(tmp_path):
    (tmp_path / "npy").mkdir()
    np.save(tmp_path / "npy" / "0.npy", np.arange(3))
    with pytest.raises(
        ValueError, match=r"npy: no subdirectory 'data', 'target': expected a subdirectory"
    ):
        bload.store.write(tmp_path / "s", tmp_path / "npy", progress=False)
    assert sorted(os.listdir(tmp_path)) == ["npy"]


@pytest.mark.parametrize("content", [b"not an array", b""])
def test_a_npy_file_numpy_cannot_read_is_named(tmp_path, content):
    # NumPy's error ("This file contains pickled (object) data", "No data left in file")
    # named no file among the directory's.
    (tmp_path / "npy").mkdir()
    np.save(tmp_path / "npy" / "0.npy", np.arange(3))
    (tmp_path / "npy" / "1.npy").write_bytes(content)
    with pytest.raises(ValueError, match=r"npy/1\.npy: .*: expected a \.npy file of one sequence"):
        bload.store.write(tmp_path / "s", tmp_path / "npy", fields="data", progress=False)
    assert sorted(os.listdir(tmp_path)) == ["npy"]


def test_overwrite_onto_a_file_or_a_directory_not_a_store_touches_nothing(tmp_path):
    file = tmp_path / "afile"
    file.write_text("mine")
    with pytest.raises(
        FileExistsError, match=r"afile: not a directory, not a store: expected a store's"
    ):
        bload.store.write(file, ITEMS, progress=False, overwrite=True)
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine too")
    with pytest.raises(FileExistsError, match=r"folder: a directory without header.json"):
        bload.store.write(folder, ITEMS, progress=False, overwrite=True)
    assert sorted(os.listdir(tmp_path)) == ["afile", "folder"]
    assert file.read_text() == "mine" and os.listdir(folder) == ["notes.txt"]
    # A store, or an empty directory, is replaced, and nothing is left beside it.
    (tmp_path / "empty").mkdir()
    bload.store.write(tmp_path / "empty", ITEMS, progress=False, overwrite=True)
    bload.store.write(tmp_path / "empty", ITEMS[:1], progress=False, overwrite=True)
    assert len(bload.SequenceStore(tmp_path / "empty")) == 1
    assert sorted(os.listdir(tmp_path)) == ["afile", "empty", "folder"]


@pytest.mark.parametrize("flag", ["overwrite", "progress"])
@pytest.mark.parametrize("value", ["no", "False", 0, None])
def test_a_flag_that_is_not_a_bool_is_refused_before_anything_is_touched(tmp_path, flag, value):
    # overwrite="no" (a string from a config, truthy) replaced the store that was there.
    path = bload.store.write(tmp_path / "s", ITEMS, progress=False)
    options = {"progress": False, "overwrite": False, flag: value}
    with pytest.raises(TypeError, match=rf"{flag} = {value!r}: expected True or False"):
        bload.store.write(path, ITEMS[:1], **options)
    assert len(bload.SequenceStore(path)) == 2 and sorted(os.listdir(tmp_path)) == ["s"]


def test_overwrite_through_a_link_replaces_the_link_and_leaves_nothing(tmp_path):
    target = bload.store.write(tmp_path / "real", ITEMS, progress=False)
    os.symlink(target, tmp_path / "link")
    bload.store.write(tmp_path / "link", ITEMS[:1], progress=False, overwrite=True)
    assert not os.path.islink(tmp_path / "link")
    assert len(bload.SequenceStore(tmp_path / "link")) == 1
    assert len(bload.SequenceStore(target)) == 2  # the store it pointed to, untouched
    assert sorted(os.listdir(tmp_path)) == ["link", "real"]


def test_steps_of_no_element_are_written_and_read_back(tmp_path):
    items = [(np.zeros((3, 0), np.float32), np.arange(3)), (np.zeros((2, 0), np.float32), [5, 6])]
    path = bload.store.write(tmp_path / "s", items, progress=False)
    store = bload.SequenceStore(path, verify=True)
    assert store[0][0].shape == (3, 0) and store[1][0].shape == (2, 0)
    assert store[1][1].tolist() == [5, 6] and os.path.getsize(os.path.join(path, "data.bin")) == 0


def check_store(path):
    command = [sys.executable, "-m", "bload", "check-store", str(path)]
    return subprocess.run(command, capture_output=True, text=True, env=child_env(), timeout=120)


@pytest.mark.parametrize(
    "header, message",
    [
        ("[]", 'format null: expected format "bload-sequence-store"'),
        ("null", 'format null: expected format "bload-sequence-store"'),
        ('{"fields": 5}', 'format null: expected format "bload-sequence-store"'),
        ("{", "not JSON"),
        (
            {"fields": [1]},
            "field 1: expected a field of name, dtype, shape and file",
        ),
        (
            {"fields": "data"},
            "a header whose fields is 'data': expected fields a list of",
        ),
        (
            {"fields": [{"name": "data", "dtype": "int64", "shape": [], "file": "data.bin"}] * 2},
            'a header naming field "data" twice: expected distinct field names',
        ),
    ],
)
def test_check_store_names_a_malformed_header_in_one_line(tmp_path, header, message):
    if not isinstance(header, str):  # the rest of a good header, with these fields
        offsets = np.array([0, 2], "<i8").tobytes()
        (tmp_path / "offsets.bin").write_bytes(offsets)
        (tmp_path / "data.bin").write_bytes(np.arange(2, dtype="<i8").tobytes())
        header = json.dumps(
            {
                "format": "bload-sequence-store",
                "version": 1,
                "count": 1,
                "steps": 2,
                "offsets_crc32": zlib.crc32(offsets),
                **header,
            }
        )
    (tmp_path / "header.json").write_text(header)
    result = check_store(tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(
        f"python -m bload check-store: error: {tmp_path / 'header.json'} = "
    ), result.stderr
    assert message in result.stderr
    # The reader refuses the same header with the same words.
    with pytest.raises(bload.StoreError) as error:
        bload.SequenceStore(tmp_path, fields="data")
    assert message in str(error.value)


def test_check_store_names_a_missing_store(tmp_path):
    result = check_store(tmp_path / "nothing")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"{tmp_path / 'nothing' / 'header.json'} = unreadable" in result.stderr


def test_check_store_passes_every_field_of_a_good_store(tmp_path):
    fields = ("x", "mask", "tok")
    items = [(np.ones((n, 2), np.float32), np.zeros(n, bool), np.arange(n)) for n in (3, 1)]
    path = bload.store.write(tmp_path / "s", items, fields=fields, progress=False)
    result = check_store(path)
    assert result.returncode == 0, result.stderr
    assert "every byte of x, mask, tok as its header says" in result.stdout
    # A flipped byte in the last field, which only a check of every field finds.
    tok = pathlib.Path(path) / "tok.bin"
    tok.write_bytes(bytes([tok.read_bytes()[0] ^ 1]) + tok.read_bytes()[1:])
    result = check_store(path)
    assert result.returncode == 1 and "tok.bin = bytes of CRC-32" in result.stderr
