"""The sequence store: bload.store.write from each source (items, a directory of .npy files, a
datasets.Dataset), read back by bload.SequenceStore whole and by ranges, pickled, and in
DataLoader workers through BlockDataset. bload.HFSequences is checked against the same sequences.
Bad stores and the writer's faults: test_store_faults.py."""

import os
import pickle
import subprocess
import sys

import bload
import numpy as np
import pytest
import torch
from conftest import child_env


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
    env = child_env()
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
