"""Read-ahead from the plan (docs/read_ahead.md): the dataset's prefetch hook is called for
exactly the pieces of the next read_ahead batches, in plan order, before they are read; batches
are the same with it as without; a bad read_ahead is refused by name; a hook that raises is
reported; a sequence store advises the kernel of exactly the byte ranges a batch reads."""

import mmap
import os
import traceback

import bload
import numpy as np
import pytest
import torch
from conftest import COLUMN

LENGTHS = [5, 17, 3, 40, 9, 22, 1, 30, 12, 7, 26, 14, 8, 19, 2, 33, 11, 6, 28, 4]
T_MAX = 16


class Recorded(torch.utils.data.Dataset):
    """Sequence i is steps 1000 * i + [0, T_i); every call is recorded, in order."""

    def __init__(self, lengths, hook=True, fail_at=None):
        self.lengths, self.calls, self.fail_at = lengths, [], fail_at
        if not hook:
            self.prefetch = None

    def __len__(self):
        return len(self.lengths)

    def get_range(self, index, offset, length):
        self.calls.append(("read", index, offset, length))
        steps = torch.arange(offset, offset + length) + 1000 * index
        return steps.float()[:, None], steps

    def prefetch(self, index, offset, length):
        if (index, offset, length) == self.fail_at:
            raise OSError(f"network storage: piece {index} unreachable")
        self.calls.append(("prefetch", index, offset, length))


def sampler(read_ahead=bload.read_ahead.READ_AHEAD, **options):
    return bload.BlockSampler(
        LENGTHS, T_MAX, 2, split=True, seed=3, read_ahead=read_ahead, **options
    )


def loader(dataset, batches, num_workers=0):
    return torch.utils.data.DataLoader(
        bload.BlockDataset(dataset, T_MAX),
        batch_sampler=batches,
        collate_fn=bload.collate,
        num_workers=num_workers,
    )


def pieces(table):
    return [
        (row[COLUMN["sequence"]], row[COLUMN["offset"]], row[COLUMN["length"]])
        for row in table.tolist()
    ]


def plan_pieces(batches):
    return [pieces(batches.plan.batch(0, i)) for i in range(len(batches))]


@pytest.mark.parametrize("read_ahead", [1, 3, 100])
def test_the_hook_starts_the_next_batches_pieces_in_plan_order(read_ahead):
    batches = sampler(read_ahead)
    planned = plan_pieces(batches)
    assert len(planned) > 4
    dataset = Recorded(LENGTHS)
    for _ in loader(dataset, batches):
        pass
    prefetched = [call[1:] for call in dataset.calls if call[0] == "prefetch"]
    assert prefetched == [piece for batch in planned for piece in batch]  # each once, in order
    # Before batch j's first read: the pieces of batches 0 ... j + read_ahead were started, no
    # more (its own with the first batch, as nothing before started them).
    reads = [n for n, call in enumerate(dataset.calls) if call[0] == "read"]
    first_read, seen = {}, 0
    for j, batch in enumerate(planned):
        first_read[j] = reads[seen]
        seen += len(batch)
    for j, at in first_read.items():
        started = sum(1 for call in dataset.calls[:at] if call[0] == "prefetch")
        through = min(j + read_ahead, len(planned) - 1)
        assert started == sum(len(batch) for batch in planned[: through + 1]), j


def test_no_hook_is_called_without_read_ahead():
    dataset = Recorded(LENGTHS)
    for _ in loader(dataset, sampler(0)):
        pass
    assert [call for call in dataset.calls if call[0] == "prefetch"] == []


def compare(one, other):
    for a, b in zip(one, other, strict=True):
        assert torch.equal(a.data, b.data) and torch.equal(a.target, b.target)
        assert torch.equal(a.table, b.table)


def test_batches_are_the_same_with_read_ahead_as_without():
    plain = list(loader(Recorded(LENGTHS, hook=False), sampler(0)))
    compare(plain, loader(Recorded(LENGTHS), sampler(4)))
    compare(plain, loader(Recorded(LENGTHS), sampler(4), num_workers=2))


def test_a_new_iteration_and_a_resume_start_their_batches_again():
    batches = sampler(2)
    planned = plan_pieces(batches)
    dataset = Recorded(LENGTHS)
    data = loader(dataset, batches)
    for _ in data:
        pass
    dataset.calls.clear()
    for _ in data:  # the same epoch again: started from its first batch
        pass
    prefetched = [call[1:] for call in dataset.calls if call[0] == "prefetch"]
    assert prefetched == [piece for batch in planned for piece in batch]
    resumed = sampler(2)
    resumed.load_state_dict(batches.state_dict(position=3))
    dataset.calls.clear()
    for _ in loader(dataset, resumed):
        pass
    prefetched = [call[1:] for call in dataset.calls if call[0] == "prefetch"]
    assert prefetched == [piece for batch in planned[3:] for piece in batch]


class Logged(Recorded):
    """Recorded, each process's calls written to a file of its own in `directory`."""

    def __init__(self, lengths, directory):
        super().__init__(lengths)
        self.directory = directory

    def get_range(self, index, offset, length):
        self._log("read", index, offset, length)
        return super().get_range(index, offset, length)

    def prefetch(self, index, offset, length):
        self._log("prefetch", index, offset, length)

    def _log(self, *call):
        with open(os.path.join(self.directory, str(os.getpid())), "a") as log:
            log.write(" ".join(map(str, call)) + "\n")


def test_each_worker_starts_exactly_the_batches_it_reads(tmp_path):
    batches = sampler(3)
    for _ in loader(Logged(LENGTHS, tmp_path), batches, num_workers=2):
        pass
    logs = sorted(tmp_path.iterdir())
    assert len(logs) == 2
    every = []
    for log in logs:
        calls = [line.split() for line in log.read_text().splitlines()]
        started = [tuple(call[1:]) for call in calls if call[0] == "prefetch"]
        read = [tuple(call[1:]) for call in calls if call[0] == "read"]
        assert sorted(started) == sorted(read) and started
        every += started
    planned = [tuple(map(str, piece)) for batch in plan_pieces(batches) for piece in batch]
    assert sorted(every) == sorted(planned)


@pytest.mark.parametrize("value", [-1, 1025])
def test_a_read_ahead_out_of_range_is_refused_by_name(value):
    with pytest.raises(ValueError, match=f"read_ahead = {value}: expected an int from 0"):
        sampler(value)


@pytest.mark.parametrize("value", [1.5, "4", True, None])
def test_a_read_ahead_not_an_int_is_refused_by_name(value):
    with pytest.raises(TypeError, match=r"read_ahead = .*: expected an int"):
        sampler(value)


def test_a_read_ahead_of_any_integer_type_is_taken_as_the_int():
    # np.int64(2) was refused ("expected an int"), where every other int option takes it.
    for value in (np.int64(2), np.uint8(2), torch.tensor(2).item()):
        batches = sampler(value)
        assert batches.read_ahead == 2 and type(batches.read_ahead) is int


def test_a_hook_that_raises_is_reported():
    batches = sampler(2)
    failing = plan_pieces(batches)[2][0]
    dataset = Recorded(LENGTHS, fail_at=failing)
    with pytest.raises(OSError, match=f"piece {failing[0]} unreachable") as raised:
        for _ in loader(dataset, batches):
            pass
    assert any(f"dataset.prefetch{failing}" in note for note in raised.value.__notes__)


def test_a_hook_that_raises_in_a_worker_is_reported():
    batches = sampler(2)
    failing = plan_pieces(batches)[3][0]
    data = iter(loader(Recorded(LENGTHS, fail_at=failing), batches, num_workers=2))
    with pytest.raises(OSError, match=f"piece {failing[0]} unreachable") as raised:
        for _ in data:
            pass
    # Its workers stop here, while their queues are open: the traceback's frames hold the
    # iterator, which freed with them by a later garbage collection (its queues first) waited
    # 5 s on each worker.
    traceback.clear_frames(raised.tb)
    del data


@pytest.fixture
def store(tmp_path):
    rng = np.random.default_rng(0)
    # Steps of 1 KiB of data: a batch's pieces span several pages.
    items = [
        (rng.standard_normal((n, 256)).astype(np.float32), np.arange(n, dtype=np.int64))
        for n in LENGTHS
    ]
    return bload.SequenceStore(bload.store.write(tmp_path / "s", items, progress=False))


def test_a_store_advises_the_kernel_of_exactly_the_ranges_a_batch_reads(store, monkeypatch):
    advised = []
    monkeypatch.setattr(
        os, "posix_fadvise", lambda fd, start, length, advice: advised.append((start, length))
    )
    batches = sampler(1)
    table = batches.plan.batch(0, 1)
    store.prefetch_table(table)
    expected = []
    for field in store.fields:
        for sequence, offset, length in pieces(table):
            first = (int(store.offsets[sequence]) + offset) * field["step_bytes"]
            end = first + length * field["step_bytes"]
            start = first - first % mmap.PAGESIZE
            end = min(-(-end // mmap.PAGESIZE) * mmap.PAGESIZE, field["bytes"])
            if expected and start <= sum(expected[-1]) and end >= expected[-1][0]:
                last = expected.pop()
                start, end = min(start, last[0]), max(end, sum(last))
            expected.append((start, end - start))
    assert advised == expected and advised
    advised.clear()
    store.prefetch(3, 5, 10)
    step = store.fields[0]["step_bytes"]
    first = (int(store.offsets[3]) + 5) * step
    assert advised[0][0] == first - first % mmap.PAGESIZE
    assert sum(advised[0]) >= first + 10 * step


def test_store_batches_are_the_same_with_read_ahead_as_without(store):
    plain = list(loader(store, sampler(0)))
    compare(plain, loader(store, sampler(3)))


def test_the_cores_ranges_refuse_a_piece_outside_the_store(store):
    table = torch.tensor([[0, 0, 5, len(LENGTHS), 0, 5]])
    with pytest.raises(RuntimeError, match=r"table\[0\] sequence = 20: expected a sequence"):
        store.prefetch_table(table)
    table = torch.tensor([[0, 0, 6, 0, 0, 5]])
    with pytest.raises(RuntimeError, match="within its 5 steps"):
        store.prefetch_table(table)
