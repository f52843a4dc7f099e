"""The item pool (bload.ItemPool, docs/read_ahead.md "Slow items"): batches are the same bit for
bit with it as without it (threads, processes, DataLoader workers, cost hints, a byte cap, packed
ahead or not); it never has more items started and not taken than max_items, nor more batches
packed ahead of the loop than max_batches; an item that raises names itself and
its batch, and every thread of the pool is joined before the error reaches the loop; a resumed
sampler's pool starts at the resumed batch and reads nothing of the batches before it."""

import multiprocessing
import threading
import time

import bload
import pytest
import torch
from conftest import COLUMN

LENGTHS = [5, 17, 3, 40, 9, 22, 1, 30, 12, 7, 26, 14, 8, 19, 2, 33, 11, 6, 28, 4, 15, 9, 21]
T_MAX = 16


class Items(torch.utils.data.Dataset):
    """Sequence i is steps 1000 * i + [0, T_i) (data float [T, 2], target int64 [T]); a read
    waits a seeded 0 to 2 ms, so reads finish out of order; every read is recorded."""

    def __init__(self, fail=None):
        self.fail, self.reads, self.lock = fail, [], threading.Lock()
        self.delay = torch.rand(len(LENGTHS), generator=torch.Generator().manual_seed(5)) / 500

    def __getstate__(self):  # a pool process's or DataLoader worker's copy records nothing back
        return {"fail": self.fail, "reads": [], "delay": self.delay}

    def __setstate__(self, state):
        self.__dict__.update(state, lock=threading.Lock())

    def __len__(self):
        return len(LENGTHS)

    def _item(self, index, offset, length):
        with self.lock:
            self.reads.append((index, offset, length))
        time.sleep(float(self.delay[index]))
        if index == self.fail:
            raise OSError(f"decoder: item {index} is damaged")
        steps = torch.arange(offset, offset + length) + 1000 * index
        return torch.stack([steps.float(), -steps.float()], 1), steps

    def __getitem__(self, index):
        return self._item(index, 0, LENGTHS[index])


class Ranges(Items):
    def get_range(self, index, offset, length):
        return self._item(index, offset, length)


def sampler(**options):
    return bload.BlockSampler(LENGTHS, T_MAX, 2, split=True, seed=3, **options)


def loader(dataset, batches, pool=None, num_workers=0):
    return torch.utils.data.DataLoader(
        bload.BlockDataset(dataset, T_MAX, item_pool=pool),
        batch_sampler=batches,
        collate_fn=bload.collate,
        num_workers=num_workers,
    )


def loader_of(blocks, batches):
    return torch.utils.data.DataLoader(blocks, batch_sampler=batches, collate_fn=bload.collate)


def contents(batches):
    return [(batch.data, batch.target, batch.table) for batch in batches]


def assert_same(got, expected):
    assert len(got) == len(expected) > 3
    for one, other in zip(got, expected):
        for a, b in zip(one, other):
            assert a.dtype == b.dtype and torch.equal(a, b)


def pool_threads():
    return [thread for thread in threading.enumerate() if thread.name == "bload-item-pool"]


def pieces(table):
    columns = [COLUMN["sequence"], COLUMN["offset"], COLUMN["length"]]
    return [tuple(row) for row in table[:, columns].tolist()]


@pytest.mark.parametrize("kind", [Items, Ranges])
@pytest.mark.parametrize(
    "pool",
    [
        lambda: bload.ItemPool(1),
        lambda: bload.ItemPool(3, max_items=2),
        lambda: bload.ItemPool(4, cost=lambda index, offset, length: -length),
        lambda: bload.ItemPool(4, max_bytes=1),
        lambda: bload.ItemPool(2, max_batches=1),
    ],
    ids=["one thread", "max_items", "cost", "max_bytes", "max_batches"],
)
def test_batches_are_the_same_with_the_pool(kind, pool):
    expected = contents(loader(kind(), sampler()))
    assert_same(contents(loader(kind(), sampler(), pool())), expected)
    assert not pool_threads()  # they end with the epoch


def test_batches_are_the_same_in_processes_and_dataloader_workers():
    expected = contents(loader(Ranges(), sampler()))
    children = set(multiprocessing.active_children())  # other tests' may still be ending
    pool = bload.ItemPool(2, processes=True)
    assert_same(contents(loader(Ranges(), sampler(), pool)), expected)
    pool.close()
    assert not set(multiprocessing.active_children()) - children
    workers = loader(Ranges(), sampler(), bload.ItemPool(2), num_workers=2)
    assert_same(contents(workers), expected)


def test_a_loop_left_part_way_and_a_new_epoch_get_their_own_batches():
    batches, pool = sampler(), bload.ItemPool(2)
    expected = contents(loader(Ranges(), sampler()))
    served = loader(Ranges(), batches, pool)
    for index, _ in enumerate(served):
        if index == 2:
            break
    assert_same(contents(served), expected)
    batches.set_epoch(1)
    reference = sampler()
    reference.set_epoch(1)
    assert_same(contents(served), contents(loader(Ranges(), reference)))


def test_no_more_items_started_than_max_items():
    """Reads wait for the test's go: with 8 threads and max_items 3, three start, no more; then,
    over the epoch, never more than 3 reads are started and not yet taken to be packed."""
    dataset, go = Ranges(), threading.Event()
    read = dataset._item
    counts = {"started": 0, "most": 0, "taken": 0}

    def held(index, offset, length):
        with dataset.lock:
            counts["started"] += 1
        go.wait(timeout=30)
        return read(index, offset, length)

    dataset._item = held
    batches = sampler()
    blocks = bload.BlockDataset(dataset, T_MAX, item_pool=bload.ItemPool(8, max_items=3))
    pack = blocks._pack_steps

    def packed(table, count, values):  # the packer takes a batch's items, then packs them
        with dataset.lock:
            counts["taken"] += len(values)
        return pack(table, count, values)

    blocks._pack_steps = packed
    served = iter(
        torch.utils.data.DataLoader(blocks, batch_sampler=batches, collate_fn=bload.collate)
    )
    first = []
    waiter = threading.Thread(target=lambda: first.append(next(served)))
    waiter.start()
    try:
        deadline = time.monotonic() + 30
        while counts["started"] < 3 and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(0.05)  # a chance for a fourth read to start, were the cap not kept
        assert counts["started"] == 3
    finally:  # the reads held go on, whatever was asserted: no thread is left waiting
        go.set()
        waiter.join()

    # From here on: a read starts only while fewer than 3 of the items started are not taken
    # by the packer (which takes a batch's items one by one: at most a batch's more).
    def counted(index, offset, length):
        with dataset.lock:
            counts["started"] += 1
            counts["most"] = max(counts["most"], counts["started"] - counts["taken"])
        return read(index, offset, length)

    dataset._item = counted
    most_per_batch = max(len(pieces(batches.plan.batch(0, i))) for i in range(len(batches)))
    for _ in served:
        pass
    assert (
        counts["taken"]
        == counts["started"]
        == sum(len(pieces(batches.plan.batch(0, i))) for i in range(len(batches)))
    )
    assert counts["most"] <= 3 + most_per_batch


@pytest.mark.parametrize("max_batches", [1, 2])
def test_batches_are_packed_ahead_and_no_more_than_max_batches(max_batches):
    """Items are instant: while the loop holds a batch, the pool packs the next max_batches and
    no more (it has read_ahead 4 in reach); a packed batch is the one the loop gets next."""
    dataset, lock, counts = Ranges(), threading.Lock(), {"packed": 0, "most": 0}
    dataset.delay.zero_()
    blocks = bload.BlockDataset(
        dataset, T_MAX, item_pool=bload.ItemPool(2, max_batches=max_batches)
    )
    pack = blocks._pack_steps

    def packed(table, count, values):
        made = pack(table, count, values)
        with lock:
            counts["packed"] += 1
        return made

    blocks._pack_steps = packed
    batches = sampler()
    expected = contents(loader(Ranges(), sampler()))
    got = []
    for handed, batch in enumerate(loader_of(blocks, batches), 1):
        got.append((batch.data, batch.target, batch.table))
        if handed == 2:  # the loop holds its batch: the pool packs ahead, up to its bound
            deadline = time.monotonic() + 30
            while counts["packed"] < handed + max_batches and time.monotonic() < deadline:
                time.sleep(0.001)
            time.sleep(0.05)  # a chance to pack one more, were the bound not kept
        with lock:
            counts["most"] = max(counts["most"], counts["packed"] - handed)
    assert counts["most"] == max_batches
    assert counts["packed"] == len(batches)
    assert_same(got, expected)
    assert not pool_threads()


@pytest.mark.parametrize("processes", [False, True])
def test_an_item_that_raises_names_itself_and_its_batch_and_stops_the_pool(processes):
    batches = sampler()
    where = next(
        (i, piece) for i in range(2, len(batches)) for piece in pieces(batches.plan.batch(0, i))
    )
    index, (sequence, _, _) = where
    first_batch = next(
        i
        for i in range(len(batches))
        if sequence in {piece[0] for piece in pieces(batches.plan.batch(0, i))}
    )
    pool = bload.ItemPool(3, processes=processes)
    children = set(multiprocessing.active_children())
    served = []
    with pytest.raises(OSError, match=f"item {sequence} is damaged") as raised:
        for batch in loader(Items(fail=sequence), batches, pool):
            served.append(batch)
    assert len(served) == first_batch  # the batches before it, delivered
    note = f"bload item pool: raised by dataset[{sequence}], an item of batch {first_batch} "
    assert any(line.startswith(note) for line in raised.value.__notes__)
    assert not pool_threads()
    assert not set(multiprocessing.active_children()) - children


def test_a_resumed_epoch_starts_the_pool_at_its_batch():
    expected = contents(loader(Ranges(), sampler()))
    batches = sampler()
    for index, _ in enumerate(loader(Ranges(), batches)):
        if index == 2:
            break
    state = batches.state_dict()  # 3 batches had: no workers, so the sampler's count is exact
    resumed, dataset = sampler(), Ranges()
    resumed.load_state_dict(state)
    got = contents(loader(dataset, resumed, bload.ItemPool(3)))
    assert_same(got, expected[3:])
    before = {piece for i in range(3) for piece in pieces(resumed.plan.batch(0, i))}
    assert dataset.reads and not before & set(dataset.reads)


def test_bad_options_are_refused_by_name():
    with pytest.raises(ValueError, match="workers = 0: expected an int from 1"):
        bload.ItemPool(0)
    with pytest.raises(TypeError, match="processes = 'yes'"):
        bload.ItemPool(2, processes="yes")
    with pytest.raises(ValueError, match="max_items = 0"):
        bload.ItemPool(2, max_items=0)
    with pytest.raises(ValueError, match="max_batches = 0"):
        bload.ItemPool(2, max_batches=0)
    with pytest.raises(TypeError, match="cost = 3"):
        bload.ItemPool(2, cost=3)
    with pytest.raises(TypeError, match="item_pool = 4: expected None or a bload.ItemPool"):
        bload.BlockDataset(Items(), T_MAX, item_pool=4)


def test_an_item_of_the_wrong_length_is_named_and_stops_the_pool():
    class Short(Ranges):
        def get_range(self, index, offset, length):
            data, target = super().get_range(index, offset, length)
            return (data[:-1], target[:-1]) if index == 3 else (data, target)

    with pytest.raises(ValueError, match=r"dataset.get_range\(3, 0, 16\) data has 15 steps"):
        for _ in loader(Short(), sampler(), bload.ItemPool(3)):
            pass
    assert not pool_threads()


def test_one_pool_passed_to_two_datasets_reads_each_ones_items():
    pool, one, two = bload.ItemPool(2), Ranges(), Ranges()
    expected = contents(loader(Ranges(), sampler()))
    assert_same(contents(loader(one, sampler(), pool)), expected)
    read_by_one = len(one.reads)
    assert_same(contents(loader(two, sampler(), pool)), expected)
    assert len(one.reads) == len(two.reads) == read_by_one
