"""bload.DevicePrefetcher: the loader's batches, in order, moved and prepared in a background
thread; errors raised in the loop; leaving early stops the thread; bad arguments named."""

import threading

import bload
import pytest
import torch
from running_sum import RunningSum

LENGTHS = [5, 9, 3, 12, 7, 1, 8, 4, 10, 6, 2, 11]
T_MAX, BLOCKS = 12, 2


def loader(workers=0):
    sampler = bload.BlockSampler(LENGTHS, T_MAX, BLOCKS, world_size=1, rank=0)
    dataset = bload.BlockDataset(RunningSum(LENGTHS, 0), T_MAX)
    return torch.utils.data.DataLoader(
        dataset, batch_sampler=sampler, collate_fn=bload.collate, num_workers=workers
    )


def prefetch_threads():
    return [t for t in threading.enumerate() if t.name == "bload-device-prefetch"]


@pytest.mark.parametrize("workers", [0, 2])
def test_the_loaders_batches_in_order_moved_and_prepared(device, workers):
    expected = list(loader())
    prefetcher = bload.DevicePrefetcher(
        loader(workers), device, ahead=3, prepare=lambda batch: (batch, batch.reset)
    )
    assert len(prefetcher) == len(expected)
    got = list(prefetcher)
    assert len(got) == len(expected)
    for (batch, reset), want in zip(got, expected):
        assert batch.data.device.type == torch.device(device).type
        assert torch.equal(batch.table, want.table)
        assert torch.equal(batch.data.cpu(), want.data)
        assert torch.equal(batch.target.cpu(), want.target)
        assert torch.equal(reset.cpu(), want.reset)
    assert not prefetch_threads()


def test_tensors_and_containers_are_moved_other_values_kept():
    items = [(torch.ones(2), {"x": torch.zeros(1), "name": "a"}, 3)]
    ((ones, mapping, three),) = list(bload.DevicePrefetcher(items, "cpu"))
    assert torch.equal(ones, torch.ones(2)) and mapping["name"] == "a" and three == 3


def test_an_error_of_the_loader_or_prepare_is_raised_in_the_loop_at_its_batch():
    def failing():
        yield torch.zeros(1)
        raise KeyError("item 7 is missing")

    seen = []
    with pytest.raises(KeyError, match="item 7 is missing"):
        for batch in bload.DevicePrefetcher(failing(), "cpu"):
            seen.append(batch)
    assert len(seen) == 1

    def prepare(batch):
        raise ValueError("no mask for this batch")

    with pytest.raises(ValueError, match="no mask for this batch"):
        list(bload.DevicePrefetcher(loader(), "cpu", prepare=prepare))
    assert not prefetch_threads()


def test_leaving_the_loop_early_stops_the_thread():
    endless = (torch.full((1,), float(i)) for i in range(10**9))
    for index, value in enumerate(bload.DevicePrefetcher(endless, "cpu", ahead=2)):
        assert value.item() == index
        if index == 5:
            break
    assert not prefetch_threads()


@pytest.mark.parametrize("ahead", [0, -1, 1.5, True, "2"])
def test_ahead_must_be_a_positive_int(ahead):
    with pytest.raises(ValueError, match=f"ahead = {ahead!r}: expected an int of at least 1"):
        bload.DevicePrefetcher([], "cpu", ahead=ahead)


def test_prepare_must_be_callable():
    with pytest.raises(TypeError, match="prepare = 'mask': expected None or a callable"):
        bload.DevicePrefetcher([], "cpu", prepare="mask")
