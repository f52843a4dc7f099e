"""Preprocessing on Ray Data against a DataLoader: one rank's epoch of packed batches whose items
each cost about 2 ms of CPU (a stand-in for decoding a clip), for BENCHMARKS.md.

    .venv/bin/python benches/ray_preprocess.py [--rounds 5] [--step-ms 100]

DataLoader: BlockDataset + BlockSampler, 2 workers (persistent). Ray: bload.ray.RayLoader on a
local Ray of 2 CPUs (ray.init(num_cpus=2)), the same sampler, the same item function. Both serve
the same batches (tests/python/test_ray.py checks they are equal bit for bit). A first epoch of
each warms the workers up and is not timed; then rounds alternate between the two, and the
figures are medians over the rounds. Items/s per CPU is items/s over the 2 CPUs each uses; an
item costs ITEM_MS of CPU, so one CPU does at most 1000 / ITEM_MS items/s.

What it implies for a cluster: a trainer that takes --step-ms per batch consumes the batch's
items in that time; the CPUs that keep it fed are that rate over the measured items/s per CPU
(assuming the per-CPU rate holds as CPUs are added: each item is independent work, so Ray's
tasks scale out until the driver, which unpickles and packs, becomes the limit).
"""

import argparse
import os
import statistics
import time

import bload
import bload.ray
import ray
import torch
from torch.utils.data import DataLoader

SEQUENCES, T_MAX, BLOCKS, FEATURES, ITEM_MS, CPUS = 800, 128, 8, 16, 2.0, 2
# Lognormal lengths (median about 30 steps), the same every run.
LENGTHS = (
    (3.4 + 0.6 * torch.randn(SEQUENCES, generator=torch.Generator().manual_seed(0)))
    .exp()
    .clamp(1, T_MAX)
    .long()
    .tolist()
)


def decode(index):
    """Item `index` after about ITEM_MS of CPU: features [T, FEATURES] and targets [T]."""
    deadline = time.thread_time() + ITEM_MS / 1000  # ITEM_MS as --item-ms set it
    spins = 0
    while time.thread_time() < deadline:
        spins += 1
    length = LENGTHS[index]
    generator = torch.Generator().manual_seed(index)
    return torch.randn(length, FEATURES, generator=generator), torch.arange(length)


class Decoded(torch.utils.data.Dataset):
    def __len__(self):
        return SEQUENCES

    def __getitem__(self, index):
        return decode(index)


def epoch_seconds(loader, sampler, epoch):
    sampler.set_epoch(epoch)
    start = time.perf_counter()
    batches = sum(1 for _ in loader)
    return time.perf_counter() - start, batches


def main():
    global ITEM_MS  # decode() reads it, in the workers too (forked, or pickled by value for Ray)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--step-ms", type=float, default=100.0, help="a trainer's time per batch")
    parser.add_argument("--in-flight", type=int, default=8, help="RayLoader batches_in_flight")
    parser.add_argument("--items-per-task", type=int, default=16, help="RayLoader items_per_task")
    parser.add_argument("--item-ms", type=float, default=ITEM_MS, help="CPU time an item costs")
    args = parser.parse_args()
    if args.item_ms <= 0:
        parser.error(f"--item-ms {args.item_ms}: expected a time above 0")
    ITEM_MS = args.item_ms
    torch.set_num_threads(1)
    ray.init(num_cpus=CPUS, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    sampler = bload.BlockSampler(LENGTHS, T_MAX, BLOCKS)
    items = len(LENGTHS)  # no sequence is split: each is read once an epoch
    dataloader = DataLoader(
        bload.BlockDataset(Decoded(), T_MAX),
        batch_sampler=sampler,
        collate_fn=bload.collate,
        num_workers=CPUS,
        persistent_workers=True,
    )
    ray_loader = bload.ray.RayLoader(
        sampler, decode, batches_in_flight=args.in_flight, items_per_task=args.items_per_task
    )
    loaders = {"DataLoader, 2 workers": dataloader, "Ray Data, 2 CPUs": ray_loader}
    for loader in loaders.values():
        epoch_seconds(loader, sampler, 0)  # warm-up: worker processes start, torch imports
    seconds = {name: [] for name in loaders}
    for round_ in range(args.rounds):
        for name, loader in loaders.items():
            elapsed, batches = epoch_seconds(loader, sampler, 1 + round_)
            seconds[name].append(elapsed)
    print(
        f"{items} items of ~{ITEM_MS:g} ms CPU in {batches} batches of {BLOCKS} x {T_MAX} steps, "
        f"{args.rounds} rounds, medians (load average {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} cores)"
    )
    ideal = 1000 / ITEM_MS
    consumption = items / batches / (args.step_ms / 1000)
    reference = statistics.median(seconds["DataLoader, 2 workers"])
    for name, times in seconds.items():
        median = statistics.median(times)
        per_cpu = items / median / CPUS
        print(
            f"  {name:22} epoch {median:6.2f} s  {items / median:7.1f} items/s  "
            f"{per_cpu:6.1f} items/s per CPU ({per_cpu / ideal:4.0%} of {ideal:g})  "
            f"{median / reference:4.2f}x the DataLoader's time"
        )
    per_cpu = items / statistics.median(seconds["Ray Data, 2 CPUs"]) / CPUS
    print(
        f"A trainer taking {args.step_ms:g} ms a batch consumes {consumption:.0f} items/s: "
        f"{consumption / per_cpu:.1f} CPUs at Ray's measured {per_cpu:.1f} items/s per CPU "
        f"keep it fed ({consumption / ideal:.1f} at the ideal {ideal:g})"
    )
    ray.shutdown()


if __name__ == "__main__":
    main()
