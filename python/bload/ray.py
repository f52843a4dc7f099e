"""bload.ray: one rank's packed batches, in plan order, with the per-item work (reading and
decoding item i, or a range of it) running on Ray Data's workers: local processes by default
(`ray.init()` with no cluster), the CPUs of every node where a Ray cluster runs.

Imported only when used (`import bload` does not import ray). The packing is BlockDataset's own
(bload.ops.pack into reused buffers), run where the batches are used; only the item function
runs on Ray. See docs/ray.md.

    sampler = bload.BlockSampler(lengths, t_max=94, blocks_per_batch=8)
    loader = bload.ray.RayLoader(sampler, load_clip, batches_in_flight=8)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for batch in loader:   # a bload.PackedBatch, as BlockDataset makes it
            ...
"""

import math
import pickle
import re
import warnings
import weakref

import ray

from bload import ops
from bload._arguments import integer
from bload._ray_tasks import JOIN_TIMEOUT, Gate, iterator_threads, load_task, worker_died
from bload.dataset import BlockDataset
from bload.sampler import BlockSampler

__all__ = ["RayLoader"]


class RayLoader:
    """Iterating it serves the sampler's batches (what `DataLoader(BlockDataset(...),
    batch_sampler=sampler)` serves, bit for bit) as bload.PackedBatches, in plan order, loading
    their items on Ray Data's workers.

    sampler: the bload.BlockSampler whose batches this rank serves (set_epoch, state_dict and
    load_state_dict work on it as with a DataLoader).
    load: the item function, run on Ray's workers, so it must pickle (a module-level function,
    or a callable object). `load(index)` returns item `index` whole, `(data, target)`, each a
    tensor [T, ...] or a dict of them, read once per batch that holds a piece of it; with
    `ranges=True`, `load(index, offset, length)` returns steps [offset, offset + length) only
    and is asked for each piece alone (as BlockDataset asks a dataset's get_range).
    batches_in_flight: the most batches whose items are being loaded or are loaded and not yet
    handed to the loop; Ray's workers wait for the loop beyond it (backpressure).
    items_per_task: items one Ray task loads (a task never spans two batches); more amortize
    Ray's cost per task, fewer spread one batch over more CPUs.
    concurrency: the most Ray tasks at once, waiting ones included (None: as many as the
    cluster's CPUs run at once, num_cpus each).
    num_cpus: the CPUs Ray reserves for each task.
    max_retries: the times a task whose worker process died (a crash, the memory killer, a lost
    node) is run again before the iteration fails naming its item (Ray Data's default is to
    retry forever, so an item that kills every worker would stall the loop). An exception the
    item function raises is not retried: it ends the iteration, naming the item.
    data_padding, target_padding, positions: as for bload.BlockDataset.

    Ray is started with `ray.init()` at the first batch when the program has not started it
    (local processes, or the cluster RAY_ADDRESS names).
    """

    def __init__(
        self,
        sampler,
        load,
        *,
        ranges=False,
        batches_in_flight=4,
        items_per_task=16,
        concurrency=None,
        num_cpus=1,
        max_retries=3,
        data_padding=0.0,
        target_padding=-100,
        positions="sequence",
    ):
        if not isinstance(sampler, BlockSampler):
            raise TypeError(f"sampler = {sampler!r:.80}: expected a bload.BlockSampler")
        if not callable(load):
            raise TypeError(
                f"load = {load!r:.80}: expected a callable, load(index) -> (data, target), or "
                "load(index, offset, length) with ranges=True"
            )
        if not isinstance(ranges, bool):
            raise TypeError(
                f"ranges = {ranges!r}: expected True (load(index, offset, length)) or False "
                "(load(index))"
            )
        self.sampler, self.load, self.ranges = sampler, load, ranges
        self.batches_in_flight = integer("batches_in_flight", batches_in_flight, 1)
        self.items_per_task = integer("items_per_task", items_per_task, 1)
        self.concurrency = None if concurrency is None else integer("concurrency", concurrency, 1)
        if (
            isinstance(num_cpus, bool)
            or not isinstance(num_cpus, (int, float))
            or not 0 <= num_cpus < math.inf  # inf: Ray's OverflowError, naming nothing
        ):
            raise ValueError(
                f"num_cpus = {num_cpus!r}: expected a finite number of CPUs, 0 or more"
            )
        self.num_cpus = num_cpus
        self.max_retries = integer("max_retries", max_retries, 0)
        # Packs as the DataLoader path packs: the items this batch loaded stand in for the dataset.
        self._loaded = _LoadedRanges() if ranges else _Loaded()
        self._packer = BlockDataset(
            self._loaded,
            sampler.t_max,
            data_padding=data_padding,
            target_padding=target_padding,
            positions=positions,
        )
        # Batches of the epoch the loop has had: the position a state_dict() saves, while the
        # sampler stands where the iteration left it (its epoch and position, `_iterated`).
        self._delivered, self._iterated = None, None
        # The backpressure gate, one actor for every iteration (an actor is a process of its
        # own: one an epoch would cost its start each epoch), the Ray job it lives in, and the
        # iteration it serves.
        self._gate, self._job, self._iteration = None, None, 0
        self._current = None  # the iteration under way, for close()

    def __len__(self):
        """The epoch's batches: the sampler's len() (a resumed iteration serves those after the
        state's position)."""
        return len(self.sampler)

    def state_dict(self):
        """The sampler's state after the batches the loop has had (not those loaded ahead). Once
        the sampler is moved on (set_epoch, or its own load_state_dict), its own state: the loop
        has had none of that epoch, or the state it was given."""
        sampler = self.sampler
        here = (sampler.epoch, sampler.position)
        if here != self._iterated or sampler._resumed:
            return sampler.state_dict()
        return sampler.state_dict(position=self._delivered)

    def load_state_dict(self, state):
        """The next iteration goes on from `state` (see BlockSampler.load_state_dict)."""
        self.sampler.load_state_dict(state)
        self._delivered, self._iterated = None, None

    def __iter__(self):
        iteration = self._batches()
        self._current = weakref.ref(iteration)
        return iteration

    def close(self):
        """Ends the iteration under way, if any, as a loop's break does: its Ray Data
        execution stopped and its threads joined before it returns."""
        current = self._current() if self._current is not None else None
        if current is not None:
            current.close()

    def _batches(self):
        # The rank's batches of this iteration, planned now (tables only: no item is read).
        batches = list(self.sampler)
        self._delivered = batches[0].index if batches else self.sampler.position
        self._iterated = (self.sampler.epoch, self.sampler.position)
        if not batches:
            return
        gate, iteration = self._start_gate()
        tasks = [task for local, batch in enumerate(batches) for task in self._tasks(local, batch)]
        for number, task in enumerate(tasks):
            task["task"] = number
        tasks_per_batch = [0] * len(batches)
        for task in tasks:
            tasks_per_batch[task["batch"]] += 1
        gate.start.remote(iteration, self.batches_in_flight)
        dataset = ray.data.from_items(tasks, override_num_blocks=len(tasks))
        # Batches come out in plan order; the caller's own DataContext is left as it is.
        dataset.context.execution_options.preserve_order = True
        dataset.context.enable_progress_bars = False
        # Tasks waiting at the gate hold their place: without a cap, Ray would start a worker
        # process for every task of the epoch while the first ones wait.
        concurrency = self.concurrency or _cluster_tasks(self.num_cpus)
        compute = ray.data.TaskPoolStrategy(size=concurrency)
        with warnings.catch_warnings():
            # Ray Data's default retries a task whose worker died forever; max_retries reaches
            # the task through ray_remote_args, which Ray 2.60 warns is deprecated without
            # naming another way to set it.
            warnings.simplefilter("ignore", DeprecationWarning)
            dataset = dataset.map_batches(
                load_task(self.load, self.ranges, gate, iteration),
                batch_size=1,
                batch_format="numpy",
                compute=compute,
                num_cpus=self.num_cpus,
                max_retries=self.max_retries,
            )
        local, loaded, delivered, outputs = 0, [], set(), iter(())
        stops, threads = None, []  # Ray Data's iterator's threads, found at the first output
        try:
            # prefetch_batches=0: an iterator that prefetches holds back a task's output until
            # the next one arrives, which the gate may hold until this batch is handed out.
            outputs = iter(
                dataset.iter_batches(batch_size=None, batch_format="numpy", prefetch_batches=0)
            )
            while True:
                try:
                    output = next(outputs)
                except StopIteration:
                    break
                except Exception as error:  # noqa: BLE001 -- named by the item it was loading
                    raise self._failure(gate, iteration, delivered, error) from error
                if stops is None:  # while the generator is suspended: its frames are there
                    stops, threads = iterator_threads(outputs)
                for position, task, items in zip(output["batch"], output["task"], output["items"]):
                    if position != local:
                        raise RuntimeError(
                            f"bload.ray: Ray Data returned a piece of batch {position} while "
                            f"batch {local} was expected: the plan's order was lost"
                        )
                    delivered.add(int(task))
                    loaded.append(items)
                    if len(loaded) < tasks_per_batch[local]:
                        continue
                    batch = self._pack(batches[local], loaded)
                    local, loaded = local + 1, []
                    self._delivered = batches[0].index + local
                    # Handed out: the workers may start on the batch batches_in_flight ahead.
                    gate.advance.remote(iteration, local)
                    yield batch
        finally:
            # A loop that stopped early: Ray Data stops the epoch's tasks, and those already
            # waiting at the gate go on and end. Its iterator's threads are stopped and joined
            # here, whichever way the iteration ended.
            outputs.close()
            gate.advance.remote(iteration, len(batches))
            for stop in stops or []:
                stop()
            for thread in threads:
                thread.join(timeout=JOIN_TIMEOUT)
        if local != len(batches):
            raise RuntimeError(f"bload.ray: Ray Data returned {local} of {len(batches)} batches")

    def _start_gate(self):
        """The gate and this iteration's number; Ray started if the program has not. A loader
        whose Ray was shut down after it ran is refused: its gate went with it."""
        if self._gate is not None:
            job = ray.get_runtime_context().get_job_id() if ray.is_initialized() else None
            if job != self._job:
                raise RuntimeError(
                    "bload.ray.RayLoader: Ray was shut down (ray.shutdown()) since this loader "
                    "last ran, and its gate actor with it: expected the Ray it started in; make a "
                    "new RayLoader once Ray runs again"
                )
        if not ray.is_initialized():
            ray.init()
        if self._gate is None:
            self._gate = Gate.options(num_cpus=0).remote()
            self._job = ray.get_runtime_context().get_job_id()
        self._iteration += 1
        return self._gate, self._iteration

    def _failure(self, gate, iteration, delivered, error):
        """The error of a Ray Data iteration that failed: where a worker died, one naming the
        item it was loading (or its task's items, where its task had more than one and had not
        run again); else Ray's own."""
        if not worker_died(error):
            return error
        try:
            running = ray.get(gate.running.remote(iteration, delivered), timeout=30)
        except Exception:  # noqa: BLE001 -- the gate gone too: Ray's error is all there is
            return error
        # The task run past max_retries, where Ray Data got that far (it may stop the epoch at
        # a task's first death); else those loading when it stopped.
        running = [task for task in running if task[0] > self.max_retries] or running
        if not running:
            return error
        name = "load({})".format
        if len(running) == 1 and (running[0][2] is not None or len(running[0][1]) == 1):
            attempts, keys, key = running[0]
            key = key if key is not None else keys[0]
            times = "once" if attempts == 1 else f"{attempts} times"
            what = f"{name(', '.join(map(str, key)))} ended its worker process {times}"
        else:
            keys = [key for _, keys, _ in running for key in keys]
            items = ", ".join(name(", ".join(map(str, key))) for key in keys)
            what = f"a worker ended while loading one of {items}"
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return RuntimeError(
            f"bload.ray: {what} (max_retries = {self.max_retries}): expected the item function "
            f"to return; Ray's error: {type(error).__name__}: {first:.300}"
        )

    def _tasks(self, local, batch):
        """The Ray tasks of one batch: its items, at most items_per_task a task."""
        column = ops.COLUMN
        rows = batch.table.tolist()
        if self.ranges:
            keys = [
                (row[column["sequence"]], row[column["offset"]], row[column["length"]])
                for row in rows
            ]
        else:
            keys = list(dict.fromkeys((row[column["sequence"]],) for row in rows))
        # A batch of empty blocks packs padding only: item 0 gives it its shape and dtype
        # (BlockDataset reads dataset[0]).
        keys = keys or [(0, 0, 1) if self.ranges else (0,)]
        step = self.items_per_task
        return [
            {"batch": local, "keys": [list(key) for key in keys[start : start + step]]}
            for start in range(0, len(keys), step)
        ]

    def _pack(self, batch, loaded):
        items = {}
        for blob in loaded:
            failed, payload = pickle.loads(blob)
            if failed is not None:
                raise failed
            items.update(((key[0] if len(key) == 1 else key), item) for key, item in payload)
        self._loaded.items = items
        if len(batch.table) == 0:
            self._loaded.items[0] = next(iter(self._loaded.items.values()))
        self._loaded.sequences = batch.sequences
        try:
            return self._packer.pack(
                batch.table,
                batch.blocks,
                carry=batch.carry,
                first_lane=batch.first_lane,
                global_batch=batch.global_batch,
            )
        except (TypeError, ValueError) as error:
            # BlockDataset names what it read as a dataset's; here that is the item function.
            message = _DATASET_READ.sub(
                lambda match: f"load({match.group(1) or match.group(2)})", str(error), count=1
            )
            raise type(error)(message) from None
        finally:
            self._loaded.items = {}


_DATASET_READ = re.compile(r"^dataset(?:\[(\d+)\]|\.get_range\(([\d, ]+)\))")


def _cluster_tasks(num_cpus):
    """The tasks of num_cpus each that the cluster's CPUs run at once (at least 1)."""
    cpus = ray.cluster_resources().get("CPU", 1)
    return max(1, int(cpus // num_cpus) if num_cpus else int(cpus))


class _Loaded:
    """One batch's loaded items, read by BlockDataset as it reads a dataset."""

    def __init__(self):
        self.items, self.sequences = {}, 0

    def __len__(self):
        return self.sequences

    def __getitem__(self, index):
        return self.items[index]


class _LoadedRanges(_Loaded):
    def get_range(self, index, offset, length):
        return self.items[(index, offset, length)]
