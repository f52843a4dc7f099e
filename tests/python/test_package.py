"""The bload package as a PyTorch user meets it: BlockSampler's DistributedSampler conventions,
resuming mid-epoch through a DataLoader with workers, BlockDataset over an ordinary dataset with
every PackedBatch field checked against the block table, pickling, the library's build check,
and the README's loop on 2 torchrun ranks."""

import os
import pickle
import re
import subprocess

import bload
import pytest
import torch
from conftest import COLUMN, ROOT, run_python
from ddp_support import HARD_TIMEOUT, TORCHRUN, free_port

T_MAX = 30


class Numbered(torch.utils.data.Dataset):
    """Item i: data [T_i, 2] with (i, t) at step t, target [T_i] = i, or both as dicts."""

    def __init__(self, lengths, as_dict=False):
        self.lengths, self.as_dict = [int(n) for n in lengths], as_dict

    def __len__(self):
        return len(self.lengths)

    def __getitem__(self, i):
        steps = torch.arange(self.lengths[i], dtype=torch.float32)
        data, target = (
            torch.stack([torch.full_like(steps, i), steps], 1),
            torch.full((self.lengths[i],), i),
        )
        if self.as_dict:
            return {"x": data, "t": steps.long()}, {"y": target}
        return data, target


def lengths_of(count, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(1, T_MAX + 1, (count,), generator=generator).tolist()


def loader_for(lengths, sampler, workers=0, **kwargs):
    return torch.utils.data.DataLoader(
        bload.BlockDataset(Numbered(lengths, **kwargs), T_MAX),
        batch_sampler=sampler,
        collate_fn=bload.collate,
        num_workers=workers,
    )


def test_set_epoch_changes_the_order_and_the_same_epoch_repeats_it():
    sampler = bload.BlockSampler(lengths_of(300), T_MAX, 4, seed=1)
    tables = {}
    for epoch in (0, 1, 0):
        sampler.set_epoch(epoch)
        tables.setdefault(epoch, []).append(torch.cat([batch.table for batch in sampler]))
    assert torch.equal(tables[0][0], tables[0][1])
    assert not torch.equal(tables[0][0], tables[1][0])
    assert sampler.plan_hash() == bload.BlockSampler(lengths_of(300), T_MAX, 4, seed=1).plan_hash()


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5])
def test_every_rank_gets_len_batches_and_every_step_is_served_once(world_size):
    lengths = lengths_of(257, seed=world_size)
    steps = torch.zeros(len(lengths), dtype=torch.long)
    counts = []
    for rank in range(world_size):
        sampler = bload.BlockSampler(lengths, T_MAX, 3, world_size=world_size, rank=rank, seed=7)
        sampler.set_epoch(2)
        batches = list(loader_for(lengths, sampler))
        assert len(batches) == len(sampler) == sampler.planner.batches_per_rank(2)
        counts.append(len(batches))
        for batch in batches:
            steps.index_add_(0, batch.indices, batch.table[:, COLUMN["length"]])
    assert counts == [counts[0]] * world_size
    assert steps.tolist() == lengths


def check_against_table(batch, lengths, blocks):
    """Every field of a PackedBatch, from its table alone."""
    table = batch.table
    assert table.dtype == torch.int64 and table.device.type == "cpu"
    assert torch.equal(batch.indices, table[:, COLUMN["sequence"]])
    expected_cu = [0]
    for piece, row in enumerate(table.tolist()):
        block, start, length = (
            row[COLUMN["block"]],
            row[COLUMN["block_offset"]],
            row[COLUMN["length"]],
        )
        sequence, offset = row[COLUMN["sequence"]], row[COLUMN["offset"]]
        assert row[COLUMN["sequence_length"]] == lengths[sequence]
        steps = slice(start, start + length)
        data = batch.data["x"] if isinstance(batch.data, dict) else batch.data
        assert bool((data[block, steps, 0] == sequence).all())
        assert data[block, steps, 1].tolist() == list(range(offset, offset + length))
        target = batch.target["y"] if isinstance(batch.target, dict) else batch.target
        assert bool((target[block, steps] == sequence).all())
        assert (
            batch.reset[block, start] and not batch.reset[block, start + 1 : start + length].any()
        )
        assert bool(
            (
                batch.segment_ids[block, steps]
                == sum(1 for r in table[:piece].tolist() if r[0] == block)
            ).all()
        )
        assert batch.position_ids[block, steps].tolist() == list(range(offset, offset + length))
        expected_cu.append(expected_cu[-1] + length)
    valid = torch.zeros(blocks, T_MAX, dtype=torch.bool)
    for row in table.tolist():
        valid[
            row[COLUMN["block"]],
            row[COLUMN["block_offset"]] : row[COLUMN["block_offset"]] + row[COLUMN["length"]],
        ] = True
    assert torch.equal(batch.valid, valid)
    assert batch.reset.sum() == len(table) and not batch.reset[~valid].any()
    assert bool((batch.segment_ids[~valid] == -1).all()) and bool(
        (batch.position_ids[~valid] == 0).all()
    )
    assert batch.cu_seqlens.tolist() == expected_cu and batch.cu_seqlens.dtype == torch.int32
    data = batch.data["x"] if isinstance(batch.data, dict) else batch.data
    assert data.shape == (blocks, T_MAX, 2) and bool((data[~valid] == 0).all())
    target = batch.target["y"] if isinstance(batch.target, dict) else batch.target
    assert bool((target[~valid] == -100).all())


@pytest.mark.parametrize("as_dict", [False, True])
@pytest.mark.parametrize("split", [False, True])
def test_block_dataset_fields_match_the_table(as_dict, split):
    lengths = lengths_of(120, seed=3) + (
        [70, 45] if split else []
    )  # longer than t_max: split in pieces
    sampler = bload.BlockSampler(lengths, T_MAX, 4, seed=5, split=split)
    for batch in loader_for(lengths, sampler, as_dict=as_dict):
        check_against_table(batch, lengths, 4)
    assert sampler.stats()["split_sequences"] == (2 if split else 0)


@pytest.mark.parametrize("workers", [0, 2])
def test_state_dict_mid_epoch_resumes_exactly_the_uninterrupted_batches(workers):
    lengths = lengths_of(400, seed=11)
    whole = bload.BlockSampler(lengths, T_MAX, 2, world_size=2, rank=1, seed=4)
    whole.set_epoch(3)
    expected = [batch.table for batch in loader_for(lengths, whole, workers)]
    interrupted = bload.BlockSampler(lengths, T_MAX, 2, world_size=2, rank=1, seed=4)
    interrupted.set_epoch(3)
    trained = []
    for batch in loader_for(
        lengths, interrupted, workers
    ):  # workers fetch batches ahead of this loop
        trained.append(batch.table)
        if len(trained) == 7:
            # The loop says what it has had: with workers the sampler has handed out more.
            state = interrupted.state_dict(position=len(trained))
            ahead = interrupted.state_dict()
            break
    assert state["epoch"] == 3 and state["position"] == 7
    # Without workers the DataLoader asks for a batch as the loop does: nothing is ahead.
    assert ahead["position"] == 7 if workers == 0 else ahead["position"] > 7
    resumed = bload.BlockSampler(lengths, T_MAX, 2, world_size=2, rank=1, seed=4)
    resumed.load_state_dict(pickle.loads(pickle.dumps(state)))
    resumed.set_epoch(3)  # the epoch being resumed goes on where it was
    assert len(resumed) == len(expected)  # the epoch's batches, 7 of them trained already
    trained += [batch.table for batch in loader_for(lengths, resumed, workers)]
    assert len(trained) == len(expected) and all(map(torch.equal, trained, expected))
    # Iterated again, the interrupted sampler serves the epoch whole (as DistributedSampler does);
    # loading the state the loop saved goes on after what the loop had.
    again = [batch.table for batch in loader_for(lengths, interrupted, workers)]
    assert len(again) == len(expected) and all(map(torch.equal, again, expected))
    interrupted.load_state_dict(state)
    rest = [batch.table for batch in loader_for(lengths, interrupted, workers)]
    assert all(map(torch.equal, rest, expected[7:])) and len(rest) == len(expected) - 7


def test_pickling_the_sampler_the_dataset_and_a_batch():
    lengths = lengths_of(100, seed=2)
    sampler = bload.BlockSampler(lengths, T_MAX, 2, seed=9)
    sampler.set_epoch(1)
    batches = iter(sampler)
    next(batches), next(batches)
    copy = pickle.loads(pickle.dumps(sampler))
    assert copy.state_dict() == sampler.state_dict() and copy.plan_hash() == sampler.plan_hash()
    assert all(torch.equal(a.table, b.table) for a, b in zip(copy, batches))
    dataset = pickle.loads(pickle.dumps(bload.BlockDataset(Numbered(lengths), T_MAX)))
    batch = dataset.__getitems__(next(iter(bload.BlockSampler(lengths, T_MAX, 2))))
    again = pickle.loads(pickle.dumps(batch))
    assert all(
        torch.equal(getattr(batch, name), getattr(again, name))
        for name in ("data", "target", "table", "reset")
    )
    moved = batch.to("cpu")
    assert moved.table is batch.table and torch.equal(moved.data, batch.data)
    if torch.cuda.is_available():
        assert batch.pin_memory().data.is_pinned()


def test_rank_and_world_size_are_checked_and_drop_last_is_refused():
    with pytest.raises(ValueError, match=r"rank = 2: expected an int from 0 to 1"):
        bload.BlockSampler([3, 4, 5], 8, world_size=2, rank=2)
    with pytest.raises(ValueError, match="drop_last = True: expected False"):
        bload.BlockSampler([3, 4, 5], 8, drop_last=True)
    with pytest.raises(TypeError, match="t_max = '8': expected an int"):
        bload.BlockSampler([3, 4, 5], "8")
    with pytest.raises(
        RuntimeError, match=r"t_max = 4: expected at least the longest sequence \(5 steps\)"
    ):
        bload.BlockSampler([3, 4, 5], 4)
    with pytest.raises(ValueError, match="t_max = 8: the sampler plans blocks of t_max = 10"):
        bload.BlockDataset(Numbered([3, 4]), 8).__getitems__(
            next(iter(bload.BlockSampler([3, 4], 10)))
        )
    with pytest.raises(ValueError, match=r"dataset\[0\] data has 4 steps: expected 9"):
        bload.BlockDataset(Numbered([4]), 10).__getitems__(next(iter(bload.BlockSampler([9], 10))))


def test_the_library_names_the_torch_it_was_built_for(monkeypatch):
    monkeypatch.delenv("BLOAD_LIBRARY", raising=False)
    monkeypatch.setattr(bload._library, "_built_for", lambda: "2.11.0")
    with pytest.raises(
        ImportError,
        match=re.escape(
            f"built for torch 2.11.0, but torch {torch.__version__} is running: rebuild"
        ),
    ):
        bload.library_path()


def test_the_library_loads_into_any_release_of_the_series_it_was_built_for(monkeypatch):
    # The wheel requires torch>=X.Y,<X.(Y+1) (bload._torch_series): the import check agrees.
    monkeypatch.delenv("BLOAD_LIBRARY", raising=False)
    major, minor = torch.__version__.split(".")[:2]
    monkeypatch.setattr(bload._library, "_built_for", lambda: f"{major}.{minor}.99+cpu")
    assert bload.library_path().endswith("libbload.so")
    monkeypatch.setattr(bload._library, "_built_for", lambda: f"{major}.{int(minor) + 1}.0")
    with pytest.raises(ImportError, match=f"built for torch {major}.{int(minor) + 1}.0, but"):
        bload.library_path()


def test_the_readme_loop_runs_on_two_torchrun_ranks(tmp_path):
    """examples/python_loop.py (the README's loop) under torchrun with gloo: rank and world size
    come from torch.distributed, and both ranks run the same batch count with the same plan."""
    port = free_port()
    command = [
        str(TORCHRUN),
        "--nnodes",
        "1",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(port),
        "--log-dir",
        str(tmp_path / "logs"),
        str(ROOT / "examples" / "python_loop.py"),
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=HARD_TIMEOUT, env=env, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # The ranks' lines may interleave: each is found by its pattern.
    found = re.findall(
        r"rank (\d): epoch (\d): (\d+) batches, loss [\d.]+, padding [\d.]+%, plan (0x[0-9a-f]{16})",
        result.stdout,
    )
    assert sorted((rank, epoch) for rank, epoch, _, _ in found) == [
        ("0", "0"),
        ("0", "1"),
        ("1", "0"),
        ("1", "1"),
    ], result.stdout
    for epoch in "01":
        batches_and_plan = {(batches, plan) for _, e, batches, plan in found if e == epoch}
        assert len(batches_and_plan) == 1, result.stdout


def test_a_position_past_the_batches_handed_out_is_refused_naming_it():
    sampler = bload.BlockSampler(lengths_of(100, seed=2), T_MAX, 2, seed=9)
    batches = iter(sampler)
    next(batches), next(batches)
    with pytest.raises(ValueError, match=r"position = 3: expected an int from 0 to 2"):
        sampler.state_dict(position=3)
    with pytest.raises(TypeError, match=r"position = 1.0: expected an int"):
        sampler.state_dict(position=1.0)
    assert sampler.state_dict(position=1)["position"] == 1 and sampler.state_dict()["position"] == 2


def test_a_state_saved_at_the_end_of_an_epoch_leaves_nothing_of_it_until_set_epoch():
    lengths = lengths_of(100, seed=2)
    sampler = bload.BlockSampler(lengths, T_MAX, 2, seed=9)
    sampler.set_epoch(2)
    whole = [batch.table for batch in sampler]
    resumed = bload.BlockSampler(lengths, T_MAX, 2, seed=9)
    resumed.load_state_dict(sampler.state_dict())
    assert len(resumed) == len(whole) and list(resumed) == []
    # Iterated since, the epoch served is served again (a loop without set_epoch); set_epoch too.
    assert all(map(torch.equal, [batch.table for batch in resumed], whole))
    resumed.set_epoch(2)
    assert len(resumed) == len(whole)
    # Loaded once set_epoch has chosen a later epoch, not yet begun (a StatefulDataLoader loads
    # its state as the iteration after the loop's set_epoch starts), it leaves that epoch whole;
    # a state with batches left of its epoch is gone on from all the same.
    served, part = sampler.state_dict(), iter(sampler)
    next(part)
    one_in = sampler.state_dict()
    rest = [batch.table for batch in part]
    sampler.set_epoch(3)
    following = [batch.table for batch in sampler]
    for state, expected, epoch in ((served, following, 3), (one_in, rest, 2)):
        later = bload.BlockSampler(lengths, T_MAX, 2, seed=9)
        later.set_epoch(3)
        later.load_state_dict(state)
        assert later.epoch == epoch and len(later) == len(following if epoch == 3 else whole)
        got = [batch.table for batch in later]
        assert len(got) == len(expected) and all(map(torch.equal, got, expected))


def test_bload_imports_and_serves_a_batch_without_numpy():
    # NumPy is not among bload's (or torch's) requirements: blocked, as if not installed.
    script = """
import pickle, sys
sys.modules["numpy"] = None
import bload
sampler = bload.BlockSampler([5, 3, 9, 2, 7, 4], t_max=8, blocks_per_batch=2, split=True)
batch = next(iter(sampler))
copy = pickle.loads(pickle.dumps(sampler))  # goes on after the batch served
print("served", len(batch.table), len(list(copy)) == len(sampler) - 1)
"""
    run = run_python(script)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.startswith("served ") and run.stdout.strip().endswith("True"), run.stdout
