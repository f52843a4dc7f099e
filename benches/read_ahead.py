"""Read-ahead from the plan against no read-ahead and a plain DataLoader, on a dataset whose reads
have a latency, for BENCHMARKS.md ("Read-ahead from the plan"). A timing, not a test.

The dataset models network storage: a read of steps [offset, offset + length) of item i waits
a round trip (--latency-ms) plus a transfer time of its steps (--step-us a step) times a cost of
its own (lognormal, sigma --spread: some items are slow to fetch, as MinatoLoader measures). A
read is a sleep, so the figures are the loaders' overlap of waiting, not of this machine's CPUs.
Its prefetch(index, offset, length) hook submits the same fetch to a pool of --connections
threads and returns; get_range then waits for the fetch if one was started, else fetches itself.

Each configuration runs an epoch --rounds times, side by side in turn, and reports the median,
with the training loop spending --train-ms on each batch (a model's step):
- bload, BlockSampler(read_ahead=k) for k in --read-ahead (0: none, the hook never called);
- a plain DataLoader over the same items, read whole (batch_size: the sequences of bload's
  batch on average, padded to the batch's longest), with as many workers.

    python benches/read_ahead.py [--workers 0 2] [--read-ahead 0 1 2 4 8 16] [--rounds 3]

With --store-mb N, instead: an epoch from a sequence store of about N MiB (64 float32 features a
step) whose files are evicted from the page cache (POSIX_FADV_DONTNEED) before each epoch, in one
process, with read_ahead 0 and each of --read-ahead: the kernel advice SequenceStore gives.

    python benches/read_ahead.py --store-mb 512 --read-ahead 0 4 [--dir DIR]
"""

import argparse
import concurrent.futures
import os
import statistics
import tempfile
import time

import bload
import numpy as np
import torch
from padded_batches import pad_collate

T_MAX, BLOCKS = 1024, 8


class NetworkItems(torch.utils.data.Dataset):
    """Item i: data float32 [T_i, features], target int64 [T_i]; every read waits its fetch."""

    def __init__(self, lengths, latency, step_time, spread, connections, features=16, seed=0):
        rng = np.random.default_rng(seed)
        self.lengths = lengths
        self.cost = rng.lognormal(0.0, spread, len(lengths))  # each item's own slowness
        self.latency, self.step_time = latency, step_time
        self.connections, self.features = connections, features
        self._pid = None

    def __getstate__(self):  # a worker makes its own pool and fetches
        return {name: value for name, value in self.__dict__.items() if name != "_pool"} | {
            "_pid": None
        }

    def __len__(self):
        return len(self.lengths)

    def _fetch(self, index, offset, length):
        time.sleep(self.latency + self.cost[index] * length * self.step_time)
        steps = torch.arange(offset, offset + length)
        return steps.float()[:, None].expand(length, self.features).contiguous(), steps

    def _started(self):
        if self._pid != os.getpid():
            self._pool = concurrent.futures.ThreadPoolExecutor(self.connections)
            self._fetches, self._pid = {}, os.getpid()
        return self._fetches

    def prefetch(self, index, offset, length):
        fetches = self._started()
        fetches[index, offset, length] = self._pool.submit(self._fetch, index, offset, length)

    def get_range(self, index, offset, length):
        fetch = self._started().pop((index, offset, length), None)
        return fetch.result() if fetch is not None else self._fetch(index, offset, length)

    def __getitem__(self, index):
        return self.get_range(index, 0, int(self.lengths[index]))


class Plain(torch.utils.data.Dataset):
    """The same items for a plain DataLoader: item i read whole, no hook."""

    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]


def epoch(loader, train):
    start = time.perf_counter()
    batches = 0
    for _ in loader:
        time.sleep(train)
        batches += 1
    return time.perf_counter() - start, batches


def store_epochs(args, lengths):
    """Cold-cache epochs from a sequence store, with and without the kernel advice."""
    features = 64
    steps = args.store_mb * 2**20 // (features * 4 + 8)
    scale = steps / lengths.sum()
    lengths = np.maximum(1, (lengths * scale).astype(np.int64))
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        rng = np.random.default_rng(2)
        row = rng.standard_normal((int(lengths.max()), features)).astype(np.float32)
        path = bload.store.write(
            os.path.join(directory, "store"),
            ((row[:n], np.arange(n, dtype=np.int64)) for n in lengths),
            total=len(lengths),
            progress=False,
        )
        store = bload.SequenceStore(path)
        files = [field["path"] for field in store.fields]

        def evict():
            for name in files:
                fd = os.open(name, os.O_RDONLY)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                os.close(fd)

        times = {k: [] for k in args.read_ahead}
        for _ in range(args.rounds):
            for k in args.read_ahead:
                sampler = bload.BlockSampler(lengths, T_MAX, BLOCKS, split=True, read_ahead=k)
                loader = torch.utils.data.DataLoader(
                    bload.BlockDataset(store, T_MAX),
                    batch_sampler=sampler,
                    collate_fn=bload.collate,
                )
                evict()
                seconds, batches = epoch(loader, args.train_ms / 1e3)
                times[k].append(seconds)
        total = sum(os.path.getsize(name) for name in files)
        print(
            f"store of {total / 2**20:.0f} MiB, {len(lengths)} sequences, {batches} batches; "
            f"page cache emptied before each epoch; train step {args.train_ms} ms; one process; "
            f"median of {args.rounds} rounds"
        )
        reference = statistics.median(times[args.read_ahead[0]])
        for k in args.read_ahead:
            median = statistics.median(times[k])
            print(f"read_ahead={k:<3} {median:8.3f} s  {reference / median:5.2f}x")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sequences", type=int, default=800)
    parser.add_argument("--median", type=int, default=200, help="median sequence length")
    parser.add_argument("--latency-ms", type=float, default=3.0)
    parser.add_argument("--step-us", type=float, default=5.0)
    parser.add_argument("--spread", type=float, default=1.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--train-ms", type=float, default=10.0)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--read-ahead", type=int, nargs="+", default=[0, 1, 2, 4, 8, 16])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--store-mb", type=int, default=0)
    parser.add_argument("--dir", default=None, help="where the store is written (--store-mb)")
    args = parser.parse_args()

    rng = np.random.default_rng(1)
    lengths = np.clip(rng.lognormal(np.log(args.median), 0.8, args.sequences), 1, 4 * T_MAX)
    lengths = lengths.astype(np.int64)
    if args.store_mb:
        return store_epochs(args, lengths)
    items = NetworkItems(
        lengths,
        args.latency_ms / 1e3,
        args.step_us / 1e6,
        args.spread,
        args.connections,
    )
    per_batch = max(1, round(BLOCKS * T_MAX / lengths.mean()))

    def bload_loader(workers, read_ahead):
        sampler = bload.BlockSampler(lengths, T_MAX, BLOCKS, split=True, read_ahead=read_ahead)
        return torch.utils.data.DataLoader(
            bload.BlockDataset(items, T_MAX),
            batch_sampler=sampler,
            collate_fn=bload.collate,
            num_workers=workers,
        )

    def plain_loader(workers):
        return torch.utils.data.DataLoader(
            Plain(items),
            batch_size=per_batch,
            shuffle=True,
            collate_fn=pad_collate,
            num_workers=workers,
        )

    configs = []
    for workers in args.workers:
        for k in args.read_ahead:
            configs.append((f"bload read_ahead={k}, workers={workers}", workers, k))
        configs.append((f"plain DataLoader, workers={workers}", workers, None))
    times = {name: [] for name, _, _ in configs}
    counts = {}
    train = args.train_ms / 1e3
    for _ in range(args.rounds):
        for name, workers, k in configs:
            loader = plain_loader(workers) if k is None else bload_loader(workers, k)
            seconds, counts[name] = epoch(loader, train)
            times[name].append(seconds)
    print(
        f"{args.sequences} sequences (median {args.median} steps), t_max {T_MAX} x {BLOCKS} blocks; "
        f"reads: {args.latency_ms} ms + {args.step_us} us a step x lognormal(sigma {args.spread}), "
        f"{args.connections} connections; train step {args.train_ms} ms; "
        f"median of {args.rounds} rounds"
    )
    for workers in args.workers:
        reference = statistics.median(times[f"bload read_ahead=0, workers={workers}"])
        plain = statistics.median(times[f"plain DataLoader, workers={workers}"])
        print(f"\nworkers={workers}")
        print(f"{'loader':34} {'batches':>7} {'epoch s':>8} {'vs none':>8} {'vs plain':>8}")
        for name, w, _ in configs:
            if w != workers:
                continue
            median = statistics.median(times[name])
            print(
                f"{name:34} {counts[name]:7d} {median:8.3f} {reference / median:7.2f}x "
                f"{plain / median:7.2f}x"
            )


if __name__ == "__main__":
    main()
