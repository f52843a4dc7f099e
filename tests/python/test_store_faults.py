"""Bad sequence stores and the writer's faults: every damaged or foreign store refused with an
error naming its file (the file truncated while mapped too, in a child process so that a SIGBUS
would fail the test rather than end the run), a full disk, an item of no step, a header number
of another kind, a store replaced after it was opened, and a flipped byte where verification is
asked."""

import errno
import json
import os
import pathlib
import subprocess
import sys
import zlib

import bload
import numpy as np
import pytest
from conftest import full_disk_after, run_python


def rewrite(path, name, change):
    file = path / name
    file.write_bytes(change(file.read_bytes()))


def header_edit(edit):
    def change(text):
        header = json.loads(text)
        edit(header)
        return json.dumps(header).encode()

    return change


def swapped_offsets(path):
    offsets = np.fromfile(path / "offsets.bin", "<i8")
    offsets[[2, 3]] = offsets[[3, 2]]
    (path / "offsets.bin").write_bytes(offsets.tobytes())
    # A checksum that matches, so that the order itself is what is refused.
    rewrite(
        path,
        "header.json",
        header_edit(lambda h: h.update(offsets_crc32=zlib.crc32(offsets.tobytes()))),
    )


@pytest.mark.parametrize(
    "damage, file, message",
    [
        (swapped_offsets, "offsets.bin", "strictly increasing offsets"),
        (lambda p: rewrite(p, "data.bin", lambda b: b[:-4]), "data.bin", "bytes: "),
        (
            lambda p: rewrite(p, "offsets.bin", lambda b: b[:8] + bytes([b[8] ^ 1]) + b[9:]),
            "offsets.bin",
            "CRC-32",
        ),
        (
            lambda p: rewrite(p, "header.json", header_edit(lambda h: h.update(version=2))),
            "header.json",
            "version 2: expected version 1",
        ),
        (
            lambda p: rewrite(
                p, "header.json", header_edit(lambda h: h["fields"][0].update(dtype="complex64"))
            ),
            "header.json",
            'dtype "complex64"',
        ),
        (
            lambda p: rewrite(
                p, "header.json", header_edit(lambda h: h["fields"][0].update(dtype="float64"))
            ),
            "data.bin",
            "steps of float64",
        ),
        (lambda p: os.remove(p / "target.bin"), "target.bin", "missing"),
    ],
)
def test_bad_stores_name_the_file_and_what_was_expected(store, damage, file, message):
    path = store.path
    damage(pathlib.Path(path))
    with pytest.raises(bload.StoreError) as error:
        bload.SequenceStore(path)
    assert str(error.value).startswith(os.path.join(path, file)) and message in str(error.value)


def test_a_file_truncated_while_mapped_is_an_error_not_a_sigbus(tmp_path):
    big = [(np.ones((100_000, 4), np.float32), np.zeros(100_000, np.int64)) for _ in range(4)]
    path = bload.store.write(tmp_path / "s", big, progress=False)
    script = f"""
import os, bload
store = bload.SequenceStore({str(path)!r})
assert float(store.get_range(3, 99_000, 10)[0].sum()) == 40.0  # mapped and read
os.truncate(os.path.join({str(path)!r}, "data.bin"), 4096)
try:
    store.get_range(3, 99_000, 10)
except bload.StoreError as err:
    print("refused:", err)
"""
    run = run_python(script)
    assert run.returncode == 0, (run.returncode, run.stderr)
    assert (
        "refused:" in run.stdout
        and "data.bin = a file of 4096 bytes: expected 6400000 bytes" in run.stdout
    )


def test_a_file_truncated_while_mapped_is_refused_in_a_blockdatasets_batch(tmp_path):
    # BlockDataset reads a batch's pieces as views of the mapping, the files checked once a
    # batch: a batch after the truncation is refused, as get_range is.
    big = [(np.ones((100_000, 4), np.float32), np.zeros(100_000, np.int64)) for _ in range(4)]
    path = bload.store.write(tmp_path / "s", big, progress=False)
    script = f"""
import os, bload
store = bload.SequenceStore({str(path)!r})
sampler = bload.BlockSampler(store.lengths, t_max=4096, blocks_per_batch=2, split=True)
dataset = bload.BlockDataset(store, t_max=4096)
batches = iter(sampler)
assert float(dataset.__getitems__(next(batches)).data.sum()) > 0  # mapped and read
os.truncate(os.path.join({str(path)!r}, "data.bin"), 4096)
try:
    dataset.__getitems__(next(batches))
except bload.StoreError as err:
    print("refused:", err)
"""
    run = run_python(script)
    assert run.returncode == 0, (run.returncode, run.stderr)
    assert "refused:" in run.stdout and "data.bin = a file of 4096 bytes" in run.stdout


def test_a_store_of_other_than_two_fields_is_named_by_blockdataset(tmp_path):
    items = [(np.zeros((5, 2), np.float32), np.zeros(5), np.ones(5)) for _ in range(3)]
    path = bload.store.write(tmp_path / "s", items, fields=["x", "mask", "tok"], progress=False)
    store = bload.SequenceStore(path, fields=["x", "mask", "tok"])
    dataset = bload.BlockDataset(store, t_max=8)
    sampler = bload.BlockSampler(store.lengths, t_max=8, blocks_per_batch=1, split=True)
    with pytest.raises(
        TypeError, match=r"dataset.get_range\(\d+, 0, \d+\): expected \(data, target\)"
    ):
        dataset.__getitems__(next(iter(sampler)))


def test_an_item_of_no_step_is_named_by_the_writer(tmp_path):
    items = [
        (np.zeros((2, 3), np.float32), np.zeros(2)),
        (np.zeros((0, 3), np.float32), np.zeros(0)),
    ]
    with pytest.raises(ValueError, match="item 1: field 'data' has 0 steps: expected a sequence"):
        bload.store.write(tmp_path / "s", items, progress=False)
    assert os.listdir(tmp_path) == []


def test_a_full_disk_names_the_stores_path_and_leaves_nothing(tmp_path, items, monkeypatch):
    monkeypatch.setattr(bload.store, "open", full_disk_after(1000), raising=False)
    path = tmp_path / "s"
    with pytest.raises(OSError, match=f"path = {path}: no space left") as error:
        bload.store.write(path, items, progress=False)
    assert error.value.errno == errno.ENOSPC
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "key, value",
    [("count", -1), ("steps", 2**64), ("offsets_crc32", "123"), ("count", None)],
)
def test_a_header_number_of_another_kind_is_named_with_its_value(store, key, value):
    path = pathlib.Path(store.path)
    if value is None:
        rewrite(path, "header.json", header_edit(lambda h: h.pop(key)))
    else:
        rewrite(path, "header.json", header_edit(lambda h: h.update({key: value})))
    shown = "missing" if value is None else repr(value)
    with pytest.raises(bload.StoreError) as error:
        bload.SequenceStore(path)
    assert str(error.value).startswith(
        f"{path / 'header.json'} = a header whose {key} is {shown}: expected {key} an integer"
    ), str(error.value)


def test_a_store_replaced_after_it_was_opened_is_named_not_cut_at_the_old_offsets(tmp_path):
    # The same total steps in other items: the files keep their sizes, the offsets do not fit.
    first = [(np.full((n, 3), n, np.float32), np.arange(n)) for n in (2, 5, 3)]
    second = [(np.full((n, 3), 9, np.float32), np.arange(n)) for n in (5, 3, 2)]
    path = bload.store.write(tmp_path / "s", first, progress=False)
    opened = bload.SequenceStore(path)  # the header read; the files map at the first read
    bload.store.write(path, second, progress=False, overwrite=True)
    with pytest.raises(bload.StoreError, match="another file than when the store was opened"):
        opened[0]
    assert bload.SequenceStore(path)[0][0].shape == (5, 3)  # opened again: the new store


def test_a_flipped_byte_is_found_where_verification_is_asked(tmp_path, items):
    path = bload.store.write(tmp_path / "s", items, progress=False)
    bload.SequenceStore(path, verify=True)  # as written
    command = [sys.executable, "-m", "bload", "check-store", str(path)]
    assert subprocess.run(command, capture_output=True, timeout=120).returncode == 0
    data = pathlib.Path(path) / "data.bin"
    flipped = bytearray(data.read_bytes())
    flipped[len(flipped) // 2] ^= 0x10
    data.write_bytes(bytes(flipped))
    store = bload.SequenceStore(path)  # the sizes still agree: only a read of every byte sees it
    with pytest.raises(
        bload.StoreError, match=r"data.bin = bytes of CRC-32 0x[0-9a-f]{8}: expected"
    ):
        store.verify()
    with pytest.raises(bload.StoreError, match="as the header says"):
        bload.SequenceStore(path, verify=True)
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "data.bin = bytes of CRC-32" in result.stderr


@pytest.mark.parametrize(
    "offset, length, name",
    [
        (0.5, 1, "offset"),
        (True, 1, "offset"),
        ("0", 1, "offset"),
        (0, 1.0, "length"),
        (0, True, "length"),
    ],
)
def test_a_range_that_is_not_ints_is_named(store, offset, length, name):
    # 0.5 failed in slicing ("slice indices must be integers"), naming nothing; True was step 1.
    value = offset if name == "offset" else length
    with pytest.raises(TypeError, match=rf"{name} = {value!r}: expected an int of steps"):
        store.get_range(0, offset, length)
    assert len(store.get_range(0, np.int64(0), np.int32(1))[0]) == 1
