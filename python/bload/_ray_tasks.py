"""bload.ray's pieces on Ray's side and around Ray Data: the backpressure gate (an actor), the
function Ray Data maps over the tasks, and what the loader asks of Ray Data's errors and threads
(bload/ray.py uses them; docs/ray.md)."""

import pickle
import threading
import traceback

import ray

__all__ = ["JOIN_TIMEOUT", "Gate", "iterator_threads", "load_task", "worker_died"]


# The seconds to wait for each of Ray Data's iterator threads once stopped: they end within
# about 0.1 s (their polling period).
JOIN_TIMEOUT = 10.0


def worker_died(error):
    """Whether a Ray Data error (or one it wraps) is a worker process's death."""
    kinds = (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError)
    kinds += (getattr(ray.exceptions, "OutOfMemoryError", ray.exceptions.WorkerCrashedError),)
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, kinds):
            return True
        error = getattr(error, "cause", None) or error.__cause__ or error.__context__
    return False


def iterator_threads(outputs):
    """(stop functions, threads) of the threads Ray Data's iter_batches started for the
    generator `outputs`: its block prefetcher's, which Ray 2.60 never stops (the thread holds
    the prefetcher, whose __del__ would stop it, so it is never collected: one parked thread an
    epoch), and its reader's (iter_threaded). Found through the suspended generators' frames,
    as Ray offers no handle on them; ([], []) before the first batch or where Ray's internals
    differ (tests/python/test_ray.py checks that none is left)."""
    try:
        frame = outputs.gi_frame
        if frame is None:  # never started, or ended
            return [], []
        batch_iterator = frame.f_locals.get("batch_iterator")
        prefetcher = getattr(batch_iterator, "_prefetcher", None)
        stops = [prefetcher.stop] if callable(getattr(prefetcher, "stop", None)) else []
        threads = [getattr(prefetcher, "_thread", None)]
        inner = outputs.gi_yieldfrom  # BatchIterator._iter_batches
        threaded = inner.gi_frame.f_locals.get("batch_iter") if inner and inner.gi_frame else None
        if threaded is not None and getattr(threaded, "gi_frame", None) is not None:
            threads += threaded.gi_frame.f_locals.get("worker_threads", [])
    except AttributeError:
        return [], []
    threads = [thread for thread in threads if isinstance(thread, threading.Thread)]
    return stops, [thread for thread in threads if thread is not threading.current_thread()]


@ray.remote
class Gate:
    """Backpressure: in iteration i, a task of batch b starts once b < batches handed out +
    batches_in_flight. Tasks of an earlier iteration (stopped early) pass at once; those of a
    later one wait for it to start."""

    def __init__(self):
        import asyncio

        self.iteration, self.handed_out, self.in_flight = 0, 0, 1
        self.changed = asyncio.Condition()
        # The iteration's tasks that came to the gate: number -> (attempts, keys, the item
        # being loaded where the task said, whether it passed the gate and is loading).
        self.tasks = {}

    async def start(self, iteration, batches_in_flight):
        async with self.changed:
            self.iteration, self.handed_out, self.in_flight = iteration, 0, batches_in_flight
            self.tasks = {}
            self.changed.notify_all()

    def _open(self, iteration, batch):
        if iteration != self.iteration:
            return iteration < self.iteration
        return batch < self.handed_out + self.in_flight

    async def wait(self, iteration, batch, task, keys):
        """Waits until the task's batch may load; returns the task's attempt (1, then 2, ... as
        Ray runs it again after its worker died)."""
        current = iteration == self.iteration
        if current:
            attempts = self.tasks.get(task, (0,))[0] + 1
            self.tasks[task] = (attempts, keys, None, False)
        async with self.changed:
            await self.changed.wait_for(lambda: self._open(iteration, batch))
        if not current or task not in self.tasks:
            return 1
        attempts, keys, _, _ = self.tasks[task]
        self.tasks[task] = (attempts, keys, None, True)  # loading from here on
        return attempts

    def loading(self, iteration, task, key):
        """A task run again says which item it loads next: the one it dies on is named."""
        if iteration == self.iteration and task in self.tasks:
            attempts, keys, _, passed = self.tasks[task]
            self.tasks[task] = (attempts, keys, key, passed)

    def running(self, iteration, delivered):
        """[(attempts, keys, the item being loaded or None)] of the iteration's tasks that were
        loading and whose output did not arrive (not in `delivered`)."""
        if iteration != self.iteration:
            return []
        return [
            (attempts, keys, key)
            for task, (attempts, keys, key, passed) in self.tasks.items()
            if passed and task not in delivered
        ]

    async def advance(self, iteration, handed_out):
        async with self.changed:
            if iteration == self.iteration:
                self.handed_out = max(self.handed_out, handed_out)
                self.changed.notify_all()


def load_task(load, ranges, gate, iteration):
    """The function Ray Data maps over the tasks: one task's items, loaded once the gate lets its
    batch in, returned as one pickle of (None, [(key, item), ...]), or of (the error, None) when
    the item function raised, naming the item. Defined here, in a closure, so Ray ships it by
    value: workers import the item function's modules, not bload."""

    def load_items(task):
        batch, number = int(task["batch"][0]), int(task["task"][0])
        keys = [tuple(int(value) for value in key) for key in task["keys"][0]]
        attempt = ray.get(gate.wait.remote(iteration, batch, number, keys))
        items = []
        for key in keys:
            if attempt > 1:
                # Run again: the worker before died. Say each item before loading it (and wait
                # for the gate to have heard), so that the one that kills the worker is named.
                ray.get(gate.loading.remote(iteration, number, key))
            try:
                items.append((key, load(*key) if ranges else load(key[0])))
            except Exception as error:  # noqa: BLE001 -- handed to the loop, naming the item
                call = f"load({', '.join(map(str, key))})"
                text = "".join(traceback.format_exception(error)).rstrip()
                failed = RuntimeError(
                    f"bload.ray: {call} raised {type(error).__name__}: {error}\n\nOn the Ray "
                    f"worker:\n{text}"
                )
                blob = pickle.dumps((failed, None))
                break
        else:
            blob = pickle.dumps((None, items), protocol=pickle.HIGHEST_PROTOCOL)
        return {"batch": [batch], "task": [number], "items": [blob]}

    return load_items
