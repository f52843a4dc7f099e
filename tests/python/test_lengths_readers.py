"""bload.read_lengths on every format, with files written here by their own libraries (NumPy,
pyarrow, datasets): .npy of every integer dtype through the core, Megatron .idx, Arrow IPC files
and streams, Parquet, datasets.Dataset (selected and shuffled too), the caches that
write_lengths_cache and `python -m bload lengths` write, and each format's refusals."""

import errno
import os
import re
import struct
import subprocess
import sys

import bload
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from conftest import ROOT, child_env, full_disk_after

LENGTHS = [3, 1, 7, 2, 9]


def list_column(lengths, large=False):
    values = pa.array(np.arange(sum(lengths), dtype=np.int32))
    offsets = pa.array(
        np.concatenate([[0], np.cumsum(lengths)]), pa.int64() if large else pa.int32()
    )
    kind = pa.LargeListArray if large else pa.ListArray
    return kind.from_arrays(offsets, values)


def table(lengths=LENGTHS, large=False):
    column = list_column(lengths, large)
    return pa.table({"input_ids": column, "labels": column, "id": pa.array(range(len(lengths)))})


@pytest.mark.parametrize("dtype", ["<i1", "<i2", "<i4", "<i8", "|u1", "<u2", ">u4", ">i8", "<u8"])
def test_numpy_written_npy_of_every_integer_dtype(tmp_path, dtype):
    path = tmp_path / "lengths.npy"
    np.save(path, np.array(LENGTHS, dtype=dtype))
    assert bload.read_lengths(path).tolist() == LENGTHS
    # The extension is not needed: the magic says .npy.
    os.rename(path, tmp_path / "lengths.bin")
    assert bload.read_lengths(tmp_path / "lengths.bin").tolist() == LENGTHS


@pytest.mark.parametrize(
    "array, found",
    [
        (np.array([1.0, 2.0], np.float32), 'dtype "<f4"'),
        (np.array([[1, 2], [3, 4]], np.int64), "an array of 2-D shape [2, 2]"),
        (np.asfortranarray(np.ones((2, 2), np.int32)), "an array in Fortran order"),
        (np.array([True, False]), 'dtype "|b1"'),
        (np.array([3, 0], np.int64), "0 (not positive)"),
    ],
)
def test_npy_refusals_name_the_file_and_what_was_expected(tmp_path, array, found):
    path = tmp_path / "bad.npy"
    np.save(path, array)
    with pytest.raises(RuntimeError) as error:
        bload.read_lengths(path)
    assert str(path) in str(error.value) and found in str(error.value)


def test_a_file_of_no_lengths_is_refused_in_every_format_the_core_reads(tmp_path):
    """An empty .npy array or .idx holds no sequence, as an empty text file does not."""
    np.save(tmp_path / "empty.npy", np.array([], np.int64))
    (tmp_path / "empty.idx").write_bytes(megatron_idx([]))
    (tmp_path / "empty.lengths").write_text("")
    for name, kind in [("empty.npy", ".npy file"), ("empty.idx", "Megatron .idx file")] + [
        ("empty.lengths", "file")
    ]:
        path = tmp_path / name
        with pytest.raises(
            RuntimeError,
            match=f"^{path} = a {kind} with no length: expected at least one sequence length$",
        ):
            bload.read_lengths(path)
    with pytest.raises(RuntimeError, match="empty.npy = a .npy file with no length"):
        bload.BlockSampler(tmp_path / "empty.npy", t_max=8)
    run = subprocess.run(
        [sys.executable, "-m", "bload", "lengths", str(tmp_path / "empty.npy")]
        + ["--out", str(tmp_path / "cache.npy")],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=120,
    )
    assert run.returncode == 1, run.stdout
    assert f"{tmp_path / 'empty.npy'} = a .npy file with no length: expected" in run.stderr
    assert not (tmp_path / "cache.npy").exists()


def test_a_path_with_a_nul_byte_is_named_whole(tmp_path):
    # C++ reads the core's messages as C strings, which ended at the NUL ('lengths file =
    # files/t.npy'): the bridge writes it as \0, so the whole path and what was expected show.
    np.save(tmp_path / "t.npy", np.array(LENGTHS))
    path = f"{tmp_path / 't.npy'}\x00xx"
    named = f"lengths file = {tmp_path / 't.npy'}\\0xx: expected a readable lengths file"
    with pytest.raises(RuntimeError, match=re.escape(named)):
        bload.read_lengths(path)
    with pytest.raises(RuntimeError, match=re.escape(named)):
        bload.BlockSampler(path, t_max=10)
    with pytest.raises(ValueError, match="out = '': expected the path of the file to write"):
        bload.write_lengths_cache(tmp_path / "t.npy", "")
    out = f"{tmp_path / 'cache.npy'}\x00"
    expected = "expected a path without a NUL byte"
    with pytest.raises(ValueError, match=re.escape(f"out = {out!r}: {expected}")):
        bload.write_lengths_cache(tmp_path / "t.npy", out)
    assert sorted(os.listdir(tmp_path)) == ["t.npy"]


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_uint64_lengths_out_of_range_are_named_with_their_own_value(kind):
    if kind == "torch" and not hasattr(torch, "uint64"):
        pytest.skip("no torch.uint64")
    values = [3, 2**63 + 5, 2**40]
    lengths = (
        np.array(values, np.uint64) if kind == "numpy" else torch.tensor(values, dtype=torch.uint64)
    )
    # Not the int64 the bits would make (-9223372036854775803).
    with pytest.raises(
        RuntimeError, match=r"^lengths\[1\] = 9223372036854775813: expected a length from 1 to "
    ):
        bload.BlockSampler(lengths, t_max=10)
    # The first out of range is named, as the core names it, whichever side of 2^63 it is.
    lengths[0] = 2**32
    with pytest.raises(RuntimeError, match=r"^lengths\[0\] = 4294967296: expected a length"):
        bload.BlockSampler(lengths, t_max=10)
    # In range, uint64 lengths plan as int64 ones do.
    in_range = (
        np.array(LENGTHS, np.uint64) if kind == "numpy" else torch.tensor(LENGTHS).to(torch.uint64)
    )
    assert len(bload.BlockSampler(in_range, t_max=10)) == len(
        bload.BlockSampler(torch.tensor(LENGTHS), t_max=10)
    )


def megatron_idx(lengths, version=1):
    pointers = np.concatenate([[0], np.cumsum(lengths)[:-1]]) * 2
    return (
        b"MMIDIDX\x00\x00"
        + struct.pack("<QBQQ", version, 8, len(lengths), len(lengths) + 1)
        + np.array(lengths, "<i4").tobytes()
        + pointers.astype("<i8").tobytes()
        + np.arange(len(lengths) + 1, dtype="<i8").tobytes()
    )


def test_megatron_idx_and_its_refusals(tmp_path):
    path = tmp_path / "train_text_document.idx"
    path.write_bytes(megatron_idx(LENGTHS))
    assert bload.read_lengths(path).tolist() == LENGTHS
    path.write_bytes(megatron_idx(LENGTHS, version=2))
    with pytest.raises(
        RuntimeError, match="Megatron .idx of version 2: expected a Megatron .idx of version 1"
    ):
        bload.read_lengths(path)
    path.write_bytes(megatron_idx(LENGTHS)[:-9])
    with pytest.raises(RuntimeError, match="truncated"):
        bload.read_lengths(path)


@pytest.mark.parametrize("large", [False, True])
def test_arrow_file_stream_and_parquet_list_columns(tmp_path, large):
    data = table(large=large)
    with pa.ipc.new_file(tmp_path / "t.arrow", data.schema) as writer:
        writer.write_table(data)
    with pa.ipc.new_stream(tmp_path / "t.stream", data.schema) as writer:  # datasets' cache files
        writer.write_table(data)
    pq.write_table(data, tmp_path / "t.parquet", row_group_size=2)
    for name in ["t.arrow", "t.stream", "t.parquet"]:
        lengths = bload.read_lengths(tmp_path / name, column="labels")
        assert lengths.dtype == torch.int64 and lengths.tolist() == LENGTHS, name
    # Forced formats, and the table itself.
    os.rename(tmp_path / "t.parquet", tmp_path / "t.data")
    assert (
        bload.read_lengths(tmp_path / "t.data", format="parquet", column="input_ids").tolist()
        == LENGTHS
    )
    assert bload.read_lengths(data, column="input_ids").tolist() == LENGTHS
    assert bload.read_lengths(data["labels"]).tolist() == LENGTHS


def test_arrow_and_parquet_refusals_name_file_format_and_column(tmp_path):
    pq.write_table(table(), tmp_path / "t.parquet")
    path = tmp_path / "t.parquet"
    with pytest.raises(
        ValueError,
        match=r"t.parquet \(parquet\) column 'id' = a column of int64: expected a list column",
    ):
        bload.read_lengths(path, column="id")
    with pytest.raises(
        ValueError,
        match=r"column = None: expected column= naming a list column, since the file has 2",
    ):
        bload.read_lengths(path)
    with pytest.raises(ValueError, match=r"column 'nope' not found"):
        bload.read_lengths(path, column="nope")
    with pytest.raises(
        ValueError, match=r"t.parquet \(arrow\): expected an Arrow IPC file or stream"
    ):
        bload.read_lengths(path, format="arrow", column="labels")
    empty = pa.table({"x": list_column([2, 0, 1])})
    with pytest.raises(
        ValueError, match=r"column 'x'\[1\] = a list of 0: expected a sequence length"
    ):
        bload.read_lengths(empty, column="x")
    nulls = pa.table({"x": pa.array([[1], None], pa.list_(pa.int32()))})
    with pytest.raises(ValueError, match=r"column 'x'\[1\] = null"):
        bload.read_lengths(nulls, column="x")
    with pytest.raises(ValueError, match="format = 'csv'"):
        bload.read_lengths(path, format="csv")
    # An array is a column itself: a column= given with it would go unread.
    for column in (list_column([2, 1]), pa.chunked_array([list_column([2, 1])])):
        assert bload.read_lengths(column).tolist() == [2, 1]
        with pytest.raises(ValueError, match=r"column = 'x': expected None for the \w*Array"):
            bload.read_lengths(column, column="x")


def test_a_hugging_face_dataset_through_its_indices_mapping():
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset(table())
    assert bload.read_lengths(ds, column="input_ids").tolist() == LENGTHS
    shuffled = ds.shuffle(seed=3).select([4, 0, 2])
    expected = [len(row) for row in shuffled["input_ids"]]
    assert bload.read_lengths(shuffled, column="input_ids").tolist() == expected
    with pytest.raises(ValueError, match="expected column= naming a list column"):
        bload.read_lengths(ds)


def test_a_filtered_dataset_is_read_as_its_rows_and_its_errors_name_them():
    """The table under a filtered or selected dataset keeps the rows left out: their lengths are
    neither returned nor checked, and an error names the row as the dataset numbers it."""
    datasets = pytest.importorskip("datasets")
    datasets.disable_progress_bars()
    ds = datasets.Dataset.from_dict({"input_ids": [[1], [], [2, 3]], "labels": [[1], [], [2, 3]]})
    kept = ds.filter(lambda row: len(row["input_ids"]) > 0)
    assert kept._indices is not None  # the empty row is still in its table
    assert bload.read_lengths(kept, column="input_ids").tolist() == [1, 2]
    assert bload.read_lengths(ds.select([2, 0]), column="input_ids").tolist() == [2, 1]
    sequences = bload.HFSequences(kept, data="input_ids", target="labels")
    assert sequences.lengths.tolist() == [1, 2]
    assert sequences[1][0].tolist() == [2, 3] and sequences[1][1].tolist() == [2, 3]
    # A row the dataset still has is refused, named by its index in the dataset (1), not the
    # table's (row 3 there).
    ds = datasets.Dataset.from_dict({"input_ids": [[1], [2], [3, 4], [], [5]]})
    with pytest.raises(
        ValueError,
        match=r"the datasets.Dataset column 'input_ids'\[1\] = a list of 0: expected a sequence",
    ):
        bload.read_lengths(ds.select([4, 3, 0]), column="input_ids")
    with pytest.raises(ValueError, match=r"column 'input_ids'\[1\] = a list of 0"):
        bload.HFSequences(ds.select([4, 3, 0]), target=None)
    # Null rows alike: refused where the dataset has them, named by its index; not read where
    # it left them out.
    nulls = datasets.Dataset(pa.table({"x": pa.array([[1], None, [2, 3]], pa.list_(pa.int32()))}))
    assert bload.read_lengths(nulls.select([2, 0]), column="x").tolist() == [2, 1]
    with pytest.raises(ValueError, match=r"column 'x'\[2\] = null: expected a list"):
        bload.read_lengths(nulls.select([0, 2, 1]), column="x")
    # A mapping that keeps no row is a dataset of no rows, whatever its table holds.
    with pytest.raises(ValueError, match=r"column 'x' = no rows: expected at least one"):
        bload.read_lengths(nulls.select([]), column="x")


def test_the_cache_from_python_and_from_the_command_lines(tmp_path):
    pq.write_table(table(), tmp_path / "t.parquet")
    out = bload.write_lengths_cache(
        tmp_path / "t.parquet", tmp_path / "cache.npy", column="labels", dtype="int32"
    )
    cached = np.load(out)
    assert cached.dtype == np.int32 and cached.tolist() == LENGTHS
    env = child_env()
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "bload",
            "lengths",
            str(tmp_path / "t.parquet"),
            "--column",
            "input_ids",
            "--out",
            str(tmp_path / "py.npy"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert np.load(tmp_path / "py.npy").dtype == np.int64
    assert bload.read_lengths(tmp_path / "py.npy").tolist() == LENGTHS
    cli = ROOT / "target" / "release" / "bload"
    run = subprocess.run(
        [str(cli), "lengths", str(tmp_path / "py.npy"), "--out", str(tmp_path / "rs.npy")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert np.array_equal(np.load(tmp_path / "rs.npy"), np.load(tmp_path / "py.npy"))
    # The sampler takes any lengths file (here the only list column of an Arrow file).
    with pa.ipc.new_file(
        tmp_path / "one.arrow", pa.schema([("x", pa.list_(pa.int32()))])
    ) as writer:
        writer.write_table(pa.table({"x": list_column(LENGTHS)}))
    sampler = bload.BlockSampler(tmp_path / "one.arrow", t_max=10)
    assert sum(len(batch.table) > 0 for batch in sampler) > 0


def test_the_cache_refuses_an_output_that_is_not_a_regular_file(tmp_path):
    lengths = tmp_path / "l.npy"
    np.save(lengths, np.array(LENGTHS))
    # As root, the rename at the end would replace the device itself.
    with pytest.raises(ValueError, match="out = /dev/null: a device or other special file"):
        bload.write_lengths_cache(lengths, "/dev/null")
    (tmp_path / "dir").mkdir()
    with pytest.raises(ValueError, match=f"out = {tmp_path / 'dir'}: a directory: expected"):
        bload.write_lengths_cache(lengths, tmp_path / "dir")
    missing = tmp_path / "absent" / "out.npy"
    with pytest.raises(
        FileNotFoundError, match=f"out = {missing}: its directory .* does not exist"
    ):
        bload.write_lengths_cache(lengths, missing)
    assert sorted(os.listdir(tmp_path)) == ["dir", "l.npy"]


def test_a_full_disk_names_the_caches_path_not_its_temporary_file(tmp_path, monkeypatch):
    lengths = tmp_path / "l.npy"
    np.save(lengths, np.array(LENGTHS))

    monkeypatch.setattr(bload.lengths, "open", full_disk_after(0), raising=False)
    out = tmp_path / "out.npy"
    with pytest.raises(OSError, match=f"out = {out}: no space left") as error:
        bload.write_lengths_cache(lengths, out)
    assert error.value.errno == errno.ENOSPC
    assert sorted(os.listdir(tmp_path)) == ["l.npy"]


def test_lengths_from_a_fifo_are_read_once_from_their_first_byte(tmp_path):
    # The format is decided from the bytes read, not by opening the path a second time (which
    # would lose what the first open took from a pipe, or hang on a FIFO).
    import threading

    fifo = tmp_path / "lengths"
    os.mkfifo(fifo)
    text = "".join(f"{n}\n" for n in range(1, 41))
    read = []
    writer = threading.Thread(target=lambda: fifo.write_text(text), daemon=True)
    reader = threading.Thread(target=lambda: read.append(bload.read_lengths(fifo)), daemon=True)
    reader.start()
    writer.start()
    reader.join(timeout=60)  # a second open of the FIFO would wait for a writer forever
    assert not reader.is_alive(), "read_lengths still waits on the FIFO"
    assert read[0].tolist() == list(range(1, 41))


def test_the_formats_are_the_cores_and_an_unknown_one_is_named(tmp_path):
    names, read_by_core = torch.ops.bload.lengths_formats()
    assert bload.lengths.FORMATS == tuple(names)
    assert {"text", "npy", "idx"} <= {n for n, core in zip(names, read_by_core) if core}
    (tmp_path / "l.txt").write_text("3\n4\n")
    run = subprocess.run(
        [sys.executable, "-m", "bload", "lengths", str(tmp_path / "l.txt")]
        + ["--lengths-format", "csv", "--out", str(tmp_path / "l.npy")],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=120,
    )
    assert run.returncode == 1
    assert f"format = 'csv': expected one of {', '.join(names)}" in run.stderr
