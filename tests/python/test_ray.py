"""bload.ray on a local Ray of 2 CPUs: the batches are the DataLoader path's (BlockDataset +
DataLoader) bit for bit, resume mid-epoch is exact, the workers never run more than
batches_in_flight batches ahead of the loop, and bad arguments are refused by name."""

import functools
import io
import os
import pathlib
import subprocess
import sys
import threading

import pytest
import torch
from conftest import child_env
from torch.utils.data import DataLoader

ray = pytest.importorskip(
    "ray", reason="ray is not installed: pip install 'ray[data]' (requirements-dev.txt)"
)

import bload  # noqa: E402
import bload.ray  # noqa: E402

T_MAX, BLOCKS = 32, 2
# Lengths up to 40 > T_MAX: with split=True some sequences are cut into pieces.
LENGTHS = torch.randint(1, 41, (48,), generator=torch.Generator().manual_seed(28)).tolist()


def clip(index):
    """Item `index`: data a dict of two tensors, target a tensor, all [T_index, ...]."""
    length = LENGTHS[index]
    generator = torch.Generator().manual_seed(index)
    data = {"x": torch.randn(length, 3, generator=generator), "frame": torch.arange(length) + index}
    return data, torch.randint(0, 5, (length,), generator=generator)


def clip_range(index, offset, length):
    data, target = clip(index)
    steps = slice(offset, offset + length)
    return {key: value[steps] for key, value in data.items()}, target[steps]


def recorded_clip_range(path, index, offset, length):
    """clip_range(...), after appending its arguments to the file at `path` (the pieces workers
    started)."""
    with open(path, "a") as record:
        record.write(f"{index},{offset},{length}\n")
    return clip_range(index, offset, length)


# An item of rank 0's first batch, for the item functions that fail on it.
BAD = int(
    bload.BlockSampler(LENGTHS, T_MAX, BLOCKS, world_size=2, rank=0, seed=3, split=True).plan.batch(
        0, 0
    )[0, bload.ops.COLUMN["sequence"]]
)


def ends_its_worker(index):
    if index == BAD:
        os._exit(1)  # as a crash, or the memory killer, would end it
    return clip(index)


def raises(index):
    if index == BAD:
        raise KeyError(f"no clip {index}")
    return clip(index)


def wrong_length(index):
    data, target = clip(index)
    return data, target[:-1]


class Clips(torch.utils.data.Dataset):
    """The same items as a map-style dataset, for the DataLoader path."""

    def __len__(self):
        return len(LENGTHS)

    def __getitem__(self, index):
        return clip(index)

    def get_range(self, index, offset, length):
        return clip_range(index, offset, length)


class WholeClips(Clips):
    get_range = None  # read whole, as a dataset without get_range


@pytest.fixture(scope="module")
def local_ray():
    # Ray's workers do not import this test's module: ship its functions by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module", autouse=True)
def ray_sessions_beside():
    """ray_sessions.py started with this module, so that its Ray sessions begin and end while
    this module's tests keep a Ray of their own busy (as the suite did when a thread touching
    Ray after ray.shutdown() ended it once)."""
    process = subprocess.Popen(
        [sys.executable, str(pathlib.Path(__file__).with_name("ray_sessions.py")), "2"],
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    yield process
    if process.poll() is None:
        process.kill()
    process.communicate()


def sampler(rank):
    return bload.BlockSampler(LENGTHS, T_MAX, BLOCKS, world_size=2, rank=rank, seed=3, split=True)


def dataloader_batches(rank, dataset):
    loader = DataLoader(
        bload.BlockDataset(dataset, T_MAX), batch_sampler=sampler(rank), collate_fn=bload.collate
    )
    return list(loader)


def assert_same(expected, got):
    assert len(got) == len(expected)
    for one, other in zip(expected, got):
        assert torch.equal(one.table, other.table)
        assert one.data.keys() == other.data.keys()
        for key in one.data:
            assert one.data[key].dtype == other.data[key].dtype
            assert torch.equal(one.data[key], other.data[key])
        assert torch.equal(one.target, other.target)
        assert torch.equal(one.reset, other.reset)
        assert (one.blocks, one.t_max, one.carries_state, one.first_lane) == (
            other.blocks,
            other.t_max,
            other.carries_state,
            other.first_lane,
        )


@pytest.mark.parametrize("ranges", [False, True], ids=["whole", "ranges"])
def test_batches_equal_the_dataloaders_on_both_ranks(local_ray, ranges):
    dataset, load = (Clips(), clip_range) if ranges else (WholeClips(), clip)
    for rank in range(2):
        expected = dataloader_batches(rank, dataset)
        loader = bload.ray.RayLoader(sampler(rank), load, ranges=ranges, items_per_task=3)
        assert len(loader) == len(expected)
        assert_same(expected, list(loader))


def test_resume_mid_epoch_equals_uninterrupted(local_ray):
    expected = dataloader_batches(1, Clips())
    loader = bload.ray.RayLoader(sampler(1), clip_range, ranges=True, batches_in_flight=2)
    first = []
    for batch in loader:
        first.append(batch)
        if len(first) == 3:
            break
    # What the loop has had, not what the workers loaded ahead.
    saved = io.BytesIO()
    torch.save(loader.state_dict(), saved)
    saved.seek(0)
    resumed = bload.ray.RayLoader(sampler(1), clip_range, ranges=True)
    resumed.load_state_dict(torch.load(saved, weights_only=True))
    assert len(resumed) == len(expected)  # the epoch's batches, not the rest's
    assert_same(expected, first + list(resumed))
    # The loader stopped early serves its next iteration whole (its workers' gate starts over).
    assert_same(expected, list(loader))


def test_a_state_after_the_sampler_moves_on_is_the_samplers(local_ray):
    # A loop that had 2 batches, then a sampler moved to another epoch, or loaded to a later
    # place of this one: the loader's state is the sampler's own (it raised, or said 2).
    whole = sampler(1)
    loader = bload.ray.RayLoader(sampler(1), clip_range, ranges=True, batches_in_flight=2)
    for count, _ in enumerate(loader, 1):
        if count == 2:
            break
    assert loader.state_dict()["position"] == 2
    loader.sampler.set_epoch(1)
    whole.set_epoch(1)
    assert loader.state_dict() == whole.state_dict()
    list(whole)  # served: its state is the epoch's end
    ahead = whole.state_dict(position=3)
    loader.sampler.load_state_dict(ahead)
    assert loader.state_dict()["position"] == 3 and loader.state_dict()["epoch"] == ahead["epoch"]


def test_workers_stay_within_batches_in_flight(local_ray, tmp_path):
    record = tmp_path / "started"
    record.touch()
    columns = [bload.ops.COLUMN[name] for name in ("sequence", "offset", "length")]
    plan = list(sampler(0))
    batch_of = {
        tuple(piece): position
        for position, batch in enumerate(plan)
        for piece in batch.table[:, columns].tolist()
    }
    in_flight = 1
    loader = bload.ray.RayLoader(
        sampler(0),
        functools.partial(recorded_clip_range, os.fspath(record)),
        ranges=True,
        batches_in_flight=in_flight,
        items_per_task=2,
    )
    had = 0
    for had, _ in enumerate(loader, 1):
        started = [tuple(map(int, line.split(","))) for line in record.read_text().split()]
        # Handed out `had` batches: the workers may have started batches up to had - 1 + in_flight.
        assert max(batch_of[piece] for piece in started) <= had - 1 + in_flight
    assert had == len(plan)


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(TypeError, match="sampler = "):
        bload.ray.RayLoader([3, 4], clip)
    with pytest.raises(TypeError, match="load = 'clip'"):
        bload.ray.RayLoader(sampler(0), "clip")
    with pytest.raises(TypeError, match="ranges = 1"):
        bload.ray.RayLoader(sampler(0), clip, ranges=1)
    with pytest.raises(ValueError, match="batches_in_flight = 0: expected an int from 1"):
        bload.ray.RayLoader(sampler(0), clip, batches_in_flight=0)
    with pytest.raises(ValueError, match="items_per_task = 0"):
        bload.ray.RayLoader(sampler(0), clip, items_per_task=0)
    with pytest.raises(ValueError, match="concurrency = -2"):
        bload.ray.RayLoader(sampler(0), clip, concurrency=-2)
    with pytest.raises(ValueError, match="num_cpus = 'x'"):
        bload.ray.RayLoader(sampler(0), clip, num_cpus="x")
    with pytest.raises(ValueError, match="num_cpus = nan"):
        bload.ray.RayLoader(sampler(0), clip, num_cpus=float("nan"))
    # inf was taken, then failed in Ray's own check (OverflowError), naming no argument.
    with pytest.raises(ValueError, match="num_cpus = inf: expected a finite number"):
        bload.ray.RayLoader(sampler(0), clip, num_cpus=float("inf"))
    with pytest.raises(ValueError, match="positions = 'block'"):
        bload.ray.RayLoader(sampler(0), clip, positions="block")
    with pytest.raises(ValueError, match="max_retries = -1: expected an int from 0"):
        bload.ray.RayLoader(sampler(0), clip, max_retries=-1)


def test_an_item_of_the_wrong_length_names_the_item_function(local_ray):
    loader = bload.ray.RayLoader(sampler(0), wrong_length)
    with pytest.raises(ValueError, match=r"load\(\d+\) target has \d+ steps: expected \d+"):
        list(loader)


def test_an_item_that_ends_its_worker_every_time_is_named_after_max_retries(local_ray):
    # Ray Data's default would run the task again without end, and the loop would wait forever.
    # One item a task, one task at a time: the item is named whether Ray Data stops the epoch
    # at the task's first death or after its last retry.
    loader = bload.ray.RayLoader(
        sampler(0), ends_its_worker, items_per_task=1, concurrency=1, max_retries=1
    )
    with pytest.raises(
        RuntimeError, match=rf"load\({BAD}\) ended its worker process .*\(max_retries = 1\)"
    ):
        list(loader)


def test_an_item_function_that_raises_is_named_with_its_item(local_ray):
    loader = bload.ray.RayLoader(sampler(0), raises, items_per_task=4)
    with pytest.raises(RuntimeError, match=rf"load\({BAD}\) raised KeyError: 'no clip {BAD}'"):
        list(loader)


def test_no_thread_is_left_after_an_epoch_a_break_or_close(local_ray):
    before = set(threading.enumerate())
    loader = bload.ray.RayLoader(sampler(1), clip)
    assert len(list(loader)) == len(sampler(1))
    for _ in loader:
        break
    batches = iter(loader)
    next(batches)
    loader.close()
    assert set(threading.enumerate()) - before == set()
    with pytest.raises(StopIteration):
        next(batches)


def test_the_process_survives_ray_shutdown_beside_a_busy_ray(ray_sessions_beside):
    # Ends Ray's sessions in a process of its own (one that Ray ends is seen here, not lost with
    # pytest), run since this module began, beside its busy Ray of the tests above.
    try:
        stdout, stderr = ray_sessions_beside.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        ray_sessions_beside.kill()
        stdout, stderr = ray_sessions_beside.communicate()
        pytest.fail(f"ray_sessions.py did not end in 300 s: {stdout}{stderr[-3000:]}")
    assert ray_sessions_beside.returncode == 0, stdout + stderr[-3000:]
    assert stdout.splitlines()[-1] == "every round survived", stdout


def test_a_loader_iterated_after_ray_shutdown_is_refused(local_ray):
    # Last in the file: Ray is started again after it, for the fixture's own shutdown.
    loader = bload.ray.RayLoader(sampler(1), clip)
    next(iter(loader))
    ray.shutdown()
    try:
        with pytest.raises(RuntimeError, match=r"Ray was shut down \(ray.shutdown\(\)\) since"):
            next(iter(loader))
    finally:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
