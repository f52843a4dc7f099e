"""ItemPool: bload prepares the items of the batches ahead itself, from the plan, so that a slow
item (a long clip to decode, a cold read) started early is ready when its batch is due, and the
batches are still exactly the plan's, in the plan's order (docs/read_ahead.md, "Slow items").

A BlockDataset given `item_pool=ItemPool(workers)` hands every item read of a batch (dataset[i]
or get_range(i, offset, length), the same calls it makes without a pool) to the pool, with
those of the batches after it that the sampler's read_ahead puts in reach (BlockBatch.ahead).
The pool's workers (threads, or threads each driving a process) read them in plan order, at most
max_items at a time not yet taken by their batch; a packer thread then takes each batch's items
in order, as soon as they are read, and packs the batch as BlockDataset would have (ahead of
the loop, as far as the batches in reach and max_batches allow), so the loop only takes a
packed batch. The pool changes when an item is read and where a batch is packed, never what a
batch holds.
"""

import collections
import concurrent.futures
import heapq
import math
import multiprocessing
import os
import pickle
import threading
import weakref

import torch

from bload._arguments import integer

__all__ = ["ItemPool"]

# Items in flight a worker by default (a slow item of 20x the rest is started a few batches
# ahead), and the most workers: the core's (ITEMS_PER_WORKER, MAX_POOL_WORKERS), as C++ reads them.
ITEMS_PER_WORKER, MAX_POOL_WORKERS = torch.ops.bload.item_pool_bounds()


class ItemPool:
    """The item pool of a bload.BlockDataset: `BlockDataset(dataset, t_max, item_pool=ItemPool(8))`.

    workers: how many items are read at once (threads, or with processes=True worker processes).
    processes: read items in a process pool of `workers` processes (the default start method;
    the dataset is pickled into each) instead of threads, for items whose preparation holds the
    GIL (Python-level decoding or augmentation). Threads suit items whose time is spent in C code
    that releases the GIL (decoders, file and network reads, numpy/torch ops): they share the
    dataset, start at once and send nothing between processes. Not inside a DataLoader worker
    (a worker process cannot have processes of its own): use it with num_workers=0 there.
    max_items: the most items started and not yet taken by the packer (memory: at most that
    many prepared items are held); by default 8 a worker. It caps how far ahead the pool reads,
    as does the sampler's read_ahead (the batches in reach).
    max_batches: the most batches packed and not yet handed to the loop (one more may be being
    packed); by default those in reach (the sampler's read_ahead). The pool packs each batch in
    its own thread as soon as its items are read, so the loop's thread only takes it.
    max_bytes: optionally, no item is started while the prepared items not yet taken hold more
    than this many bytes of tensors (those being read may add theirs on top).
    cost: optionally `cost(index, offset, length)`, a number for a piece of sequence `index`
    (the whole sequence: offset 0, its length), e.g. from its length: a free worker takes the
    costliest item started first, so slow items get a head start. It orders work only; the
    items started and the batches are the same.

    The dataset must allow reads from several threads at once (with processes=True, from its
    pickled copies). An item that raises ends the epoch: its batch raises the same exception
    with a note naming the item and the batch, after every worker has stopped; so does a wrong
    item (its packing's error, as without the pool). The pool's
    threads end with each epoch (a loop left part-way leaves them idle until the next iteration
    or close()); a process pool is kept for the next epoch until close().
    """

    def __init__(
        self,
        workers,
        *,
        processes=False,
        max_items=None,
        max_batches=None,
        max_bytes=None,
        cost=None,
    ):
        self.workers = integer("workers", workers, 1, MAX_POOL_WORKERS)
        if not isinstance(processes, bool):
            raise TypeError(f"processes = {processes!r}: expected True or False (threads)")
        self.processes = processes
        default = ITEMS_PER_WORKER * self.workers
        self.max_items = default if max_items is None else integer("max_items", max_items, 1)
        # By default every batch in reach (the sampler's read_ahead) may be packed ahead.
        self.max_batches = (
            math.inf if max_batches is None else integer("max_batches", max_batches, 1)
        )
        self.max_bytes = None if max_bytes is None else integer("max_bytes", max_bytes, 1)
        if cost is not None and not callable(cost):
            raise TypeError(f"cost = {cost!r:.60}: expected None or cost(index, offset, length)")
        self.cost = cost
        self._run = None  # this process's running pool (_Run), made at its first batch

    def __getstate__(self):  # a DataLoader worker's copy starts with nothing running
        return {**self.__dict__, "_run": None}

    def __repr__(self):
        return (
            f"ItemPool({self.workers}, processes={self.processes}, max_items={self.max_items}, "
            f"max_batches={None if self.max_batches == math.inf else self.max_batches}, "
            f"max_bytes={self.max_bytes})"
        )

    def close(self):
        """Stops the workers (after the items being read, the batch being packed) and forgets
        what they prepared."""
        if self._run is not None:
            self._run.stop(processes=True)
            self._run = None

    def batch(self, batch, reads, read, pack, dataset):
        """pack(batch.table, batch.blocks, values), made in the pool's packer thread, where
        values are the values of the batch's item reads, in order: reads(table) lists a table's
        reads, each (arguments, piece, name), whose value is read(*arguments) (with
        processes=True, the dataset's get_range(*arguments), or dataset[index] for one
        argument). The reads of the batches ahead (batch.ahead) that this process serves are
        started too, and those batches packed (pack(table, batch.blocks, values)) once read."""
        run = self._run
        if run is not None and run.pid == os.getpid() and run.read != read:
            run.stop(processes=True)  # a pool passed to another dataset: that one's reads now
            run = None
        if run is None or run.pid != os.getpid():
            if self.processes and torch.utils.data.get_worker_info() is not None:
                raise RuntimeError(
                    "ItemPool(processes=True) in a DataLoader worker: a worker process cannot "
                    "start processes of its own; expected num_workers=0 with processes=True, or "
                    "processes=False (threads) in the workers"
                )
            run = self._run = _Run(self, read, dataset)
        return run.batch(batch, reads, pack)


class _Task:
    __slots__ = ("order", "batch", "arguments", "name", "done", "value", "error", "bytes")

    def __init__(self, order, batch, arguments, name):
        self.order, self.batch, self.arguments, self.name = order, batch, arguments, name
        self.done, self.value, self.error, self.bytes = False, None, None, 0

    def __lt__(self, other):
        return self.order < other.order


class _Run:
    """One process's running pool: the reads of the batches in reach, started in plan order up
    to max_items not yet taken, read by `workers` threads; a packer thread takes each batch's
    items in plan order once they are read and packs the batch, at most max_batches of them
    packed and not yet handed to the loop."""

    def __init__(self, pool, read, dataset):
        self.pool, self.read, self.pid = pool, read, os.getpid()
        self.lock = threading.Lock()
        # Workers wait for reads to start; the packer for what `asleep` says; the loop for its
        # batch to be packed.
        self.work, self.wake = threading.Condition(self.lock), threading.Condition(self.lock)
        self.packed = threading.Condition(self.lock)
        self.threads, self.packer = [], None
        self.executor = None
        if pool.processes:
            context = multiprocessing.get_context()
            self.executor = concurrent.futures.ProcessPoolExecutor(
                pool.workers, context, initializer=_install, initargs=(dataset,)
            )
            weakref.finalize(self, self.executor.shutdown, wait=False, cancel_futures=True)
            # The processes start now, from this thread, before the pool's threads do: a fork
            # copies only the thread that forks, and none of the pool's locks is then held.
            self.executor.submit(int).result()
        self._reset()

    def _reset(self):
        # The epoch and the next batch this process is expected to read; the batches registered
        # and not yet packed (plan order: (index, tasks, how to pack it)), the batches packed
        # and not yet handed out (index -> (value, error, the task that raised)); the reads not
        # yet started (plan order), those started and not taken by the packer (a heap in the
        # order workers take them), and the bytes of the prepared ones.
        self.epoch, self.expected, self.last_registered = None, None, None
        self.to_pack, self.finished = collections.deque(), {}
        self.waiting, self.queue = collections.deque(), []
        self.started, self.ready_bytes, self.stopping = 0, 0, False
        # What the packer waits for: "room" (fewer batches packed than max_batches), "batch"
        # (one to pack), the read (a _Task) it takes next, or None (it is not waiting). Whoever
        # brings that about wakes it, and nothing else does: the loop's thread wakes no thread
        # of the pool in its next() unless it must (a thread woken then takes the GIL from it).
        self.asleep = None

    # The caller's side (the thread that reads batches).
    def batch(self, batch, reads, pack):
        info = torch.utils.data.get_worker_info()
        stride = info.num_workers if info is not None else 1
        if self.epoch != batch.epoch or self.expected != batch.index:
            # A new epoch or iteration (a loop left part-way, a state loaded): nothing prepared
            # belongs to it.
            self.stop(processes=False)
            self.epoch, self.last_registered = batch.epoch, batch.index - 1
        self.expected = batch.index + stride
        new = []
        for step, table in enumerate((batch.table, *batch.ahead)):
            index = batch.index + step
            if step % stride == 0 and index > self.last_registered:
                new.append(self._tasks(index, reads(table), (pack, table, batch.blocks)))
                self.last_registered = index
        with self.lock:
            for registered in new:
                self.to_pack.append(registered)
                self.waiting.extend(registered[1])
            self._admit()
            if self.packer is None:
                self.packer = threading.Thread(
                    target=self._pack_ahead, name="bload-item-pool", daemon=True
                )
                self.packer.start()
            if new and self.asleep == "batch":
                # The packer, idle, is woken by the new batch's first read once it is done.
                tasks = self.to_pack[0][1]
                if tasks and tasks[0] not in self.waiting:
                    self.asleep = tasks[0]
                else:
                    self.wake.notify()  # no read to wait for, or one not started (max_bytes)
            try:
                while batch.index not in self.finished:
                    self.wake.notify()  # this thread waits anyway: the packer may go on
                    self.packed.wait()
            except BaseException:  # interrupted (KeyboardInterrupt): no thread left running
                self.lock.release()
                try:
                    self.stop(processes=True)
                finally:
                    self.lock.acquire()
                raise
            value, error, task = self.finished.pop(batch.index)
            if self.asleep == "room":
                self.wake.notify()
            # Nothing registered after it (the packer may be packing the next one).
            last = self.last_registered == batch.index
        if error is not None:
            self.stop(processes=True)
            self.pool._run = None
            if task is not None:
                error.add_note(
                    f"bload item pool: raised by {task.name}, an item of batch {batch.index} "
                    f"(epoch {batch.epoch})"
                )
            raise error
        if last:  # the epoch's last batch in reach: the threads end with it
            self.stop(processes=False)
        return value

    def _tasks(self, index, reads, how):
        cost = self.pool.cost
        tasks = []
        for position, (arguments, piece, name) in enumerate(reads):
            # Workers take started reads in plan order, or the costliest first.
            order = (index, position) if cost is None else (-float(cost(*piece)), index, position)
            tasks.append(_Task(order, index, arguments, name))
        return index, tasks, how

    def _admit(self):
        """Starts reads in plan order while fewer than max_items are started and not taken
        (and, with max_bytes, the prepared ones hold no more than it). Holding the lock."""
        pool = self.pool
        while self.waiting and self.started < pool.max_items and not self.stopping:
            if pool.max_bytes is not None and self.ready_bytes > pool.max_bytes:
                break
            heapq.heappush(self.queue, self.waiting.popleft())
            self.started += 1
            self.work.notify()
        while len(self.threads) < min(pool.workers, self.started) and not self.stopping:
            thread = threading.Thread(target=self._work, name="bload-item-pool", daemon=True)
            thread.start()
            self.threads.append(thread)

    def stop(self, processes):
        """Stops the threads (each after its read or its pack) and drops every read and batch
        of this run; with `processes`, the process pool too."""
        with self.lock:
            self.stopping = True
            self.queue.clear()
            for condition in (self.work, self.wake):
                condition.notify_all()
        if self.packer is not None:  # first: it starts no worker once stopping
            self.packer.join()
        for thread in self.threads:
            thread.join()
        if processes and self.executor is not None:
            self.executor.shutdown(wait=True, cancel_futures=True)
            self.executor = None
        self.threads, self.packer = [], None
        self._reset()

    # The packer thread's side.
    def _pack_ahead(self):
        while True:
            with self.lock:
                while not self.stopping:
                    if len(self.finished) >= self.pool.max_batches:
                        self.asleep = "room"
                    elif not self.to_pack:
                        self.asleep = "batch"
                    else:
                        break
                    self.wake.wait()
                self.asleep = None
                if self.stopping:
                    return
                index, tasks, (pack, table, blocks) = self.to_pack.popleft()
            values, error, raised_by = [], None, None
            for task in tasks:
                if not self._take(task):
                    return
                if task.error is not None:
                    error, raised_by = task.error, task
                    break
                values.append(task.value)
            if error is None:
                try:
                    values = pack(table, blocks, values)
                except BaseException as raised:  # a wrong item: raised in the loop, as is
                    error = raised
            with self.lock:
                self.finished[index] = (values if error is None else None, error, raised_by)
                self.packed.notify()
            if error is not None:  # the loop stops the run at this batch
                return

    def _take(self, task):
        """Waits for `task`'s read (False: the run stops) and takes it: one item fewer started
        and not taken, so the next are started."""
        with self.lock:
            if task in self.waiting:
                # Not started: only when max_bytes held it back and nothing before it is left
                # to take (it is the next read of the batch being packed): start it now.
                self.waiting.remove(task)
                heapq.heappush(self.queue, task)
                self.started += 1
                self.work.notify()
                self._admit()
            while not task.done and not self.stopping:
                self.asleep = task
                self.wake.wait()
            self.asleep = None
            if not task.done:
                return False
            self.started -= 1
            self.ready_bytes -= task.bytes
            self._admit()
            return True

    # A worker thread's side.
    def _work(self):
        while True:
            with self.lock:
                while not self.queue and not self.stopping:
                    self.work.wait()
                if self.stopping:
                    return
                task = heapq.heappop(self.queue)
            try:
                if self.executor is not None:
                    sent = self.executor.submit(_read_installed, *task.arguments).result()
                    value = pickle.loads(sent)
                else:
                    value = self.read(*task.arguments)
                error = None
            except BaseException as raised:  # handed to the batch that takes the item
                value, error = None, raised
            with self.lock:
                task.value, task.error, task.done = value, error, True
                task.bytes = _tensor_bytes(value)
                self.ready_bytes += task.bytes
                if self.asleep is task:
                    self.wake.notify()


def _tensor_bytes(value):
    if isinstance(value, torch.Tensor):
        return value.nbytes
    if isinstance(value, (tuple, list)):
        return sum(_tensor_bytes(part) for part in value)
    if isinstance(value, dict):
        return sum(_tensor_bytes(part) for part in value.values())
    return 0


# A pool process's dataset, installed once when the process starts.
_DATASET = None


def _install(dataset):
    global _DATASET
    _DATASET = dataset


def _read_installed(index, *piece):
    value = _DATASET.get_range(index, *piece) if piece else _DATASET[index]
    # Sent back as bytes: pickled by the pool's own pipe, torch's tensors would each go through
    # a shared-memory file of their own, far slower for the small tensors of one item.
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
