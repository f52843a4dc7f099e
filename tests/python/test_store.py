"""The sequence store: bload.store.write from each source (items, a directory of .npy files, a
datasets.Dataset), read back by bload.SequenceStore whole and by ranges, pickled, in DataLoader
workers through BlockDataset, and every bad store refused with an error naming its file (the
file truncated while mapped too, in a child process so that a SIGBUS would fail the test rather
than end the run). bload.HFSequences is checked against the same sequences."""

import errno
import json
import os
import pathlib
import pickle
import subprocess
import sys
import zlib

import bload
import numpy as np
import pytest
import torch


def sequences(count=40, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        length = int(rng.integers(1, 30))
        out.append(
            (
                rng.standard_normal((length, 3)).astype(np.float32),
                np.arange(length, dtype=np.int64) + i,
            )
        )
    return out


@pytest.fixture
def items():
    return sequences()


@pytest.fixture
def store(tmp_path, items):
    return bload.SequenceStore(bload.store.write(tmp_path / "s", items, progress=False))


def test_round_trip_lengths_items_and_ranges(store, items):
    assert len(store) == len(items)
    assert store.lengths.tolist() == [len(data) for data, _ in items]
    for i, (data, target) in enumerate(items):
        got = store[i]
        assert np.array_equal(got[0].numpy(), data) and np.array_equal(got[1].numpy(), target)
        offset, length = len(data) // 3, len(data) - len(data) // 3 - 1
        part = store.get_range(i, offset, length)
        assert np.array_equal(part[0].numpy(), data[offset : offset + length])
        assert np.array_equal(part[1].numpy(), target[offset : offset + length])
    # Copies, the caller's own: the same steps twice are two tensors' memory.
    assert store.get_range(3, 1, 1)[0].data_ptr() != store[3][0][1:].data_ptr()
    with pytest.raises(IndexError, match="expected a range within its"):
        store.get_range(0, 0, len(items[0][0]) + 1)
    with pytest.raises(IndexError, match="index = 40"):
        store[40]


def test_dtypes_shapes_and_tensors(tmp_path):
    items = [
        {
            "x": torch.randn(n, 2, 2).to(torch.bfloat16),
            "mask": torch.rand(n) > 0.5,
            "tok": np.arange(n, dtype=">u2"),
        }
        for n in (3, 1, 5)
    ]
    store = bload.SequenceStore(
        bload.store.write(tmp_path / "s", iter(items), fields=["x", "mask", "tok"], progress=False),
        fields=["x", "mask", "tok"],
    )
    for i, item in enumerate(items):
        x, mask, tok = store[i]
        assert x.dtype == torch.bfloat16 and torch.equal(x, item["x"])
        assert mask.dtype == torch.bool and torch.equal(mask, item["mask"])
        assert tok.tolist() == item["tok"].tolist()
    with pytest.raises(
        ValueError, match=r"item 1: field 'data' = float64 \[T, 3\]: expected float32 \[T, 2\]"
    ):
        bload.store.write(
            tmp_path / "t",
            [(np.zeros((2, 2), np.float32), np.zeros(2)), (np.zeros((2, 3)), np.zeros(2))],
            progress=False,
        )
    with pytest.raises(ValueError, match="expected the same steps in every field"):
        bload.store.write(tmp_path / "t", [(np.zeros((2, 2)), np.zeros(3))], progress=False)
    # A failed write leaves nothing behind: no store, no temporary directory.
    assert sorted(os.listdir(tmp_path)) == ["s"]
    with pytest.raises(FileExistsError):
        bload.store.write(tmp_path / "s", items, fields=["x", "mask", "tok"], progress=False)


def test_from_a_directory_of_npy_files(tmp_path, items):
    for field, column in (("data", 0), ("target", 1)):
        (tmp_path / "npy" / field).mkdir(parents=True)
        for i, item in enumerate(items):
            np.save(tmp_path / "npy" / field / f"{i:04d}.npy", item[column])
    store = bload.SequenceStore(bload.store.write(tmp_path / "s", tmp_path / "npy", progress=False))
    assert np.array_equal(store[7][0].numpy(), items[7][0])
    one = bload.store.write(
        tmp_path / "one", tmp_path / "npy" / "target", fields="data", progress=False
    )
    assert bload.SequenceStore(one, fields="data")[5][0].tolist() == items[5][1].tolist()


def test_pickles_as_its_path_and_packs_in_workers(store, items):
    assert len(pickle.dumps(store)) < 300
    assert torch.equal(pickle.loads(pickle.dumps(store))[9][0], store[9][0])
    sampler = bload.BlockSampler(store.lengths, t_max=16, blocks_per_batch=2, split=True)
    dataset = bload.BlockDataset(store, t_max=16)
    # The same sequences in memory, read whole: the packing every other dataset gets.
    reference = bload.BlockDataset(
        [(torch.from_numpy(d), torch.from_numpy(t)) for d, t in items], t_max=16
    )
    batches = list(sampler)
    loader = torch.utils.data.DataLoader(
        dataset, batch_sampler=batches, collate_fn=bload.collate, num_workers=2
    )
    for batch, packed in zip(batches, loader):
        expected = reference.__getitems__(batch)
        assert torch.equal(packed.data, expected.data) and torch.equal(
            packed.target, expected.target
        )


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
    run = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )
    assert run.returncode == 0, (run.returncode, run.stderr)
    assert (
        "refused:" in run.stdout
        and "data.bin = a file of 4096 bytes: expected 6400000 bytes" in run.stdout
    )


def test_hf_sequences_and_a_store_from_a_dataset(tmp_path, items):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict(
        {
            "input_ids": [data.tolist() for data, _ in items],
            "labels": [target.tolist() for _, target in items],
        }
    )
    shuffled = ds.shuffle(seed=1)
    order = shuffled._indices.column(0).to_numpy()
    sequences = bload.HFSequences(shuffled, data="input_ids", target="labels")
    assert sequences.lengths.tolist() == [len(items[i][0]) for i in order]
    for i, row in enumerate(order[:10]):
        data, target = sequences.get_range(i, 1, 0 if len(items[row][0]) < 2 else 1)
        assert data.shape[1:] == (3,) and np.allclose(
            data.numpy(), items[row][0][1 : 1 + len(data)]
        )
        assert target.tolist() == items[row][1][1 : 1 + len(target)].tolist()
    store = bload.SequenceStore(
        bload.store.write(
            tmp_path / "hf", shuffled, columns=["input_ids", "labels"], progress=False
        )
    )
    assert torch.equal(store.lengths, sequences.lengths)
    for i in range(len(store)):
        assert torch.equal(store[i][1], sequences[i][1]) and torch.allclose(
            store[i][0].double(), sequences[i][0]
        )


def test_the_store_command_from_npy_files_and_parquet(tmp_path, items):
    for field, column in (("data", 0), ("target", 1)):
        (tmp_path / "npy" / field).mkdir(parents=True)
        for i, item in enumerate(items[:5]):
            np.save(tmp_path / "npy" / field / f"{i}.npy", item[column])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    command = [
        sys.executable,
        "-m",
        "bload",
        "store",
        str(tmp_path / "s"),
        "--npy",
        str(tmp_path / "npy"),
        "--fields",
        "data",
        "target",
    ]
    run = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "5 sequences" in run.stdout
    assert np.array_equal(bload.SequenceStore(tmp_path / "s")[4][1].numpy(), items[4][1])
    # A second write to the same path is refused, naming it.
    run = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 1 and f"path = {tmp_path / 's'}" in run.stderr


def test_fields_are_taken_by_name_whatever_their_order_in_the_header(tmp_path, items):
    # Written target first: the header lists target before data. Read by name, as C++ reads it.
    swapped = [(target, data) for data, target in items]
    path = bload.store.write(tmp_path / "s", swapped, fields=("target", "data"), progress=False)
    store = bload.SequenceStore(path)
    assert [field["name"] for field in store.fields] == ["data", "target"]
    data, target = store[4]
    assert np.array_equal(data.numpy(), items[4][0]) and target.tolist() == items[4][1].tolist()
    batch = next(iter(bload.BlockSampler(store.lengths, t_max=16, split=True)))
    packed = bload.BlockDataset(store, t_max=16).__getitems__(batch)
    assert packed.data.dtype == torch.float32 and packed.target.dtype == torch.int64
    # Any other order is asked for by name, and a name the store lacks is refused, naming both.
    assert (
        bload.SequenceStore(path, fields=("target", "data"))[4][0].tolist() == items[4][1].tolist()
    )
    with pytest.raises(bload.StoreError, match=r"'label' not in the store .*\(target, data\)"):
        bload.SequenceStore(path, fields=("data", "label"))
    with pytest.raises(TypeError, match=r"fields = \('data', 'data'\): expected"):
        bload.SequenceStore(path, fields=("data", "data"))
    # A pickle keeps the names.
    again = pickle.loads(pickle.dumps(bload.SequenceStore(path, fields=("target", "data"))))
    assert again[4][0].tolist() == items[4][1].tolist()


def test_a_write_into_a_tensor_handed_out_is_not_seen_by_later_reads(store, items):
    data, target = store[0]
    target -= 100
    data.zero_()
    assert store[0][1].tolist() == items[0][1].tolist()
    assert np.array_equal(store.get_range(0, 0, 1)[0].numpy(), items[0][0][:1])
    # BlockDataset reads views of the mapping (one copy, into the batch), never a written copy.
    batch = next(iter(bload.BlockSampler(store.lengths, t_max=16, split=True)))
    packed = bload.BlockDataset(store, t_max=16).__getitems__(batch)
    packed.target.fill_(7)
    assert store[0][1].tolist() == items[0][1].tolist()


def test_an_item_of_no_step_is_named_by_the_writer(tmp_path):
    items = [
        (np.zeros((2, 3), np.float32), np.zeros(2)),
        (np.zeros((0, 3), np.float32), np.zeros(0)),
    ]
    with pytest.raises(ValueError, match="item 1: field 'data' has 0 steps: expected a sequence"):
        bload.store.write(tmp_path / "s", items, progress=False)
    assert os.listdir(tmp_path) == []


def full_disk_after(budget):
    """open() for the writer whose files' writes fail with ENOSPC once `budget` bytes are written
    (a full disk, without filling one)."""
    written = [0]

    class File:
        def __init__(self, file):
            self.file = file

        def write(self, data):
            written[0] += len(memoryview(data).cast("B"))
            if written[0] > budget:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return self.file.write(data)

        def __getattr__(self, name):
            return getattr(self.file, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

    return lambda *args, **kwargs: File(open(*args, **kwargs))


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
