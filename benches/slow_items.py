"""Slow items and loader wait: how much of an epoch the training loop spends waiting for its next
batch when items take a heavy-tailed time to prepare (decoding, resampling), for
docs/benchmarks/slow_items.md. A timing, not a test.

The dataset models a video or audio decoder: item i takes --fast-ms, or --slow-ms for a share
--slow-share of the items (decided by a seeded generator, so the same items are slow in every
run and every loader), waited with time.sleep, which releases the GIL as a decoder's C code
does. With --uniform, every item takes the mean of that distribution instead (the same total
work, no tail). The training loop spends --step-ms on each batch (a sleep: a model's step).

Each loader serves one epoch of the same sequences with --workers of its own, side by side in
turn for --rounds rounds; the figures are medians:
- plain: a padded torch DataLoader (shuffled, as many sequences a batch as bload's batches hold
  on average), num_workers worker processes, in order (the default);
- plain in_order=False: the same, handing out whichever batch is ready first (the batches then
  depend on timing);
- bload, no pool: DataLoader(BlockDataset, batch_sampler=BlockSampler(read_ahead=4)),
  num_workers worker processes, the items of a batch read one after another in its worker;
- bload item pool (when this bload has it): BlockDataset(item_pool=bload.ItemPool(workers)),
  no DataLoader workers: that many threads prepare the items of the batches ahead in plan order
  (and the pool's packer thread packs each batch ahead once its items are read);
  again with each item's cost as the pool's cost hint (the slowest started first), and with
  processes=True (that many processes);
- the plain DataLoader and the item pool again, each iterated through bload.DevicePrefetcher
  (device "cpu": its background thread takes the loader's next batch during the step).

Loader wait is the time the loop spends in next() (the first batch's, worker start included),
as a share of the epoch's wall time; "first s" is the first batch's part of it (starting the
workers and filling the first batch), "after %" the share without it (the steady state).

    python benches/slow_items.py [--workers 4] [--rounds 3] [--uniform]
"""

import argparse
import statistics
import time
import warnings

import bload
import numpy as np
import torch
from padded_batches import pad_collate

T_MAX, BLOCKS, FEATURES = 256, 4, 8


class SlowItems(torch.utils.data.Dataset):
    """Item i: (data float32 [T_i, FEATURES], target int64 [T_i]), after a wait of its cost. The
    tensors are made once, here: an item's time is its wait alone, the same in every loader."""

    def __init__(self, lengths, cost):
        self.cost = cost
        self.items = []
        for index, length in enumerate(lengths.tolist()):
            steps = torch.arange(length, dtype=torch.int64) + index
            self.items.append((steps.float()[:, None].expand(length, FEATURES).contiguous(), steps))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        time.sleep(self.cost[index])
        return self.items[index]


def epoch(loader, step):
    """(wall seconds of the epoch, seconds the loop waited for batches, of which for the first)."""
    start = time.perf_counter()
    waited, first, batches = 0.0, None, 0
    iterator = iter(loader)
    while True:
        asked = time.perf_counter()
        try:
            next(iterator)
        except StopIteration:
            waited += time.perf_counter() - asked
            break
        waited += time.perf_counter() - asked
        first = waited if first is None else first
        time.sleep(step)
        batches += 1
    del iterator
    return time.perf_counter() - start, waited, first


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sequences", type=int, default=900)
    parser.add_argument("--median", type=int, default=100, help="median sequence length")
    parser.add_argument("--fast-ms", type=float, default=2.0)
    parser.add_argument("--slow-ms", type=float, default=40.0)
    parser.add_argument("--slow-share", type=float, default=0.1)
    parser.add_argument("--uniform", action="store_true", help="every item the mean cost")
    parser.add_argument("--step-ms", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    # torch warns of more workers than this machine's cores; the workers here mostly sleep.
    warnings.filterwarnings("ignore", message="This DataLoader will create")

    rng = np.random.default_rng(1)
    lengths = np.clip(rng.lognormal(np.log(args.median), 0.6, args.sequences), 1, T_MAX)
    lengths = lengths.astype(np.int64)
    slow = np.random.default_rng(2).random(args.sequences) < args.slow_share
    cost = np.where(slow, args.slow_ms, args.fast_ms) / 1e3
    mean_ms = (1 - args.slow_share) * args.fast_ms + args.slow_share * args.slow_ms
    if args.uniform:
        cost = np.full(args.sequences, mean_ms / 1e3)
    items = SlowItems(lengths, cost)
    workers, step = args.workers, args.step_ms / 1e3

    batches = len(bload.BlockSampler(lengths, T_MAX, BLOCKS))
    per_batch = args.sequences / batches

    def plain(in_order):
        return torch.utils.data.DataLoader(
            items,
            batch_size=round(per_batch),
            shuffle=True,
            generator=torch.Generator().manual_seed(0),
            collate_fn=pad_collate,
            num_workers=workers,
            in_order=in_order,
        )

    def bload_today():
        return torch.utils.data.DataLoader(
            bload.BlockDataset(items, T_MAX),
            batch_sampler=bload.BlockSampler(lengths, T_MAX, BLOCKS),
            collate_fn=bload.collate,
            num_workers=workers,
        )

    def bload_pool(**options):
        return torch.utils.data.DataLoader(
            bload.BlockDataset(items, T_MAX, item_pool=bload.ItemPool(workers, **options)),
            batch_sampler=bload.BlockSampler(lengths, T_MAX, BLOCKS),
            collate_fn=bload.collate,
        )

    configs = {
        f"plain DataLoader, {workers} worker processes": lambda: plain(True),
        f"plain DataLoader in_order=False, {workers} processes": lambda: plain(False),
        f"bload, no pool (read_ahead=4), {workers} workers": bload_today,
    }
    if hasattr(bload, "ItemPool"):
        configs[f"bload ItemPool({workers}), threads"] = bload_pool
        configs[f"bload ItemPool({workers}, cost=each item's), threads"] = lambda: bload_pool(
            cost=lambda index, offset, length: cost[index]
        )
        configs[f"bload ItemPool({workers}, processes=True)"] = lambda: bload_pool(processes=True)
    if hasattr(bload, "DevicePrefetcher"):
        # Each loader's next() run in a background thread during the step, as on a GPU, where
        # the prefetcher also moves the batch: the loop's next() only takes a ready batch.
        configs[f"plain DataLoader, {workers} processes, DevicePrefetcher"] = lambda: (
            bload.DevicePrefetcher(plain(True), "cpu")
        )
        if hasattr(bload, "ItemPool"):
            configs[f"bload ItemPool({workers}), threads, DevicePrefetcher"] = lambda: (
                bload.DevicePrefetcher(bload_pool(), "cpu")
            )
    figures = {name: [] for name in configs}
    for _ in range(args.rounds):
        for name, make in configs.items():
            figures[name].append(epoch(make(), step))

    print(
        f"{args.sequences} sequences, {batches} batches of {per_batch:.1f} on average "
        f"(bload: {BLOCKS} blocks of {T_MAX} steps); items "
        + (
            f"all {mean_ms:.1f} ms"
            if args.uniform
            else f"{args.fast_ms:g} ms, {args.slow_share:.0%} of them {args.slow_ms:g} ms "
            f"(mean {mean_ms:.1f} ms)"
        )
        + f"; train step {args.step_ms:g} ms; median of {args.rounds} rounds"
    )
    supply = workers * 1e3 / mean_ms
    demand = per_batch / step
    print(
        f"throughput condition: {workers} workers / {mean_ms:.1f} ms = {supply:.0f} items/s "
        f">= {per_batch:.1f} items / {args.step_ms:g} ms = {demand:.0f} items/s: "
        f"{'holds' if supply >= demand else 'does not hold'} ({supply / demand:.2f}x)"
    )
    print(f"{'loader':56} {'epoch s':>8} {'wait s':>7} {'first s':>7} {'wait %':>7} {'after %':>7}")
    for name, runs in figures.items():
        seconds, waited, first = (statistics.median(run[i] for run in runs) for i in range(3))
        share = statistics.median(run[1] / run[0] for run in runs)
        after = statistics.median((run[1] - run[2]) / (run[0] - run[2]) for run in runs)
        print(f"{name:56} {seconds:8.2f} {waited:7.2f} {first:7.2f} {share:7.1%} {after:7.1%}")


if __name__ == "__main__":
    main()
