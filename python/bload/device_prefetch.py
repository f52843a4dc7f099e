"""DevicePrefetcher: a loader's batches taken, moved to the device and prepared ahead of the loop,
in a background thread, so that the training thread finds each batch ready.

Between two steps, a loop that reads its DataLoader takes the next batch from a worker (the
shared-memory hand-over of each tensor), moves it, and makes what the step needs from it (a
flex_attention BlockMask, say): milliseconds of host time in the training thread, during which a
GPU waits where the step has just ended in a sync (`loss.item()`). Here they happen in another
thread, while the step runs (the training thread releases the GIL while it waits for the GPU):
docs/benchmarks/gpu.md measured that wait on an H100.

    loader = DataLoader(BlockDataset(dataset, t_max), batch_sampler=sampler,
                        collate_fn=bload.collate, num_workers=2, pin_memory=True)
    for batch, mask in bload.DevicePrefetcher(loader, "cuda",
                                             prepare=lambda b: (b, b.block_mask())):
        out = model(batch.data, mask)

The copies are made non_blocking on the stream that was current where the prefetcher was
iterated (on CUDA), so they are ordered before the steps that use them with no event to wait on
and no tensor crosses streams. They come from pinned memory (the DataLoader's pin_memory=True for
data and target; the tables and masks bload makes on the host are pinned before they are
copied), so queuing them never waits for the step that is running.
"""

import contextlib
import queue
import threading

import torch

from bload.batch import PackedBatch

_END = object()


class _Failure:
    def __init__(self, error):
        self.error = error


def to_device(value, device):
    """`value` (a PackedBatch, a tensor, or tuples, lists and dicts of them) on `device`,
    non_blocking; anything else as it is."""
    if isinstance(value, (PackedBatch, torch.Tensor)):
        return value.to(device, non_blocking=True)
    if isinstance(value, (tuple, list)):
        return type(value)(to_device(item, device) for item in value)
    if isinstance(value, dict):
        return {key: to_device(item, device) for key, item in value.items()}
    return value


class DevicePrefetcher:
    """Iterates `loader` in a background thread, up to `ahead` batches before the loop: each batch
    moved to `device` (`.to(device, non_blocking=True)`: PackedBatch, tensors, and tuples, lists
    and dicts of them) and, with `prepare`, replaced by `prepare(batch)`, which runs in that thread
    too. The batches come in the loader's order; an error raised by the loader or `prepare` is
    raised in the loop, at the batch where it happened. Leaving the loop early stops the thread
    after the batch it is loading."""

    def __init__(self, loader, device, *, ahead=2, prepare=None):
        if isinstance(ahead, bool) or not isinstance(ahead, int) or ahead < 1:
            raise ValueError(f"ahead = {ahead!r}: expected an int of at least 1 (batches ahead)")
        if prepare is not None and not callable(prepare):
            raise TypeError(
                f"prepare = {prepare!r:.60}: expected None or a callable taking the moved batch"
            )
        self.loader, self.device = loader, torch.device(device)
        self.ahead, self.prepare = ahead, prepare

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        ready = queue.Queue(maxsize=self.ahead)
        stop = threading.Event()
        stream = torch.cuda.current_stream(self.device) if self.device.type == "cuda" else None

        def put(item):  # waits for room, unless the loop has left
            while not stop.is_set():
                try:
                    ready.put(item, timeout=0.05)
                    return True
                except queue.Full:
                    continue
            return False

        def load():
            try:
                # The loop's stream: the copies are ordered before the steps that read them.
                context = (
                    torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()
                )
                with context:
                    for batch in self.loader:
                        moved = to_device(batch, self.device)
                        if not put(self.prepare(moved) if self.prepare else moved):
                            return
                put(_END)
            except BaseException as error:  # raised again in the loop, where it belongs
                put(_Failure(error))

        thread = threading.Thread(target=load, name="bload-device-prefetch", daemon=True)
        thread.start()
        try:
            while True:
                item = ready.get()
                if item is _END:
                    return
                if isinstance(item, _Failure):
                    raise item.error
                yield item
        finally:
            stop.set()
            thread.join()
