"""An epoch of packed batches (split sequences, t_max 1,024, 8 blocks a batch) from three
datasets of the same generated sequences, side by side, for BENCHMARKS.md: the sequence store
(bload.SequenceStore, ranges of the mapping), a dataset that np.loads one .npy per item (read
whole, as most code reads files), and in-memory tensors (views of one tensor). A timing, not a
test.

For each: bytes of real steps packed per second, steps loaded per step packed (the store reads
only what it packs: 1.00), and the store's epoch against a memcpy of the same bytes. Page cache
warm: each dataset's epoch is run twice, the first counting the steps it reads, and the second,
on the dataset itself, is reported. On a machine whose page cache is reclaimed under the files
(some VMs' hosts do), --dir /dev/shm keeps them in memory. One process, no DataLoader
workers, so the figures are the datasets' and the packing's own.

    python benches/store_epoch.py [--gigabytes 1.0] [--features 64] [--dir DIR]
"""

import argparse
import os
import tempfile
import time

import bload
import numpy as np
import torch

T_MAX, BLOCKS = 1024, 8


class Counted(torch.utils.data.Dataset):
    """Counts the steps `inner` returns, whole items and ranges alike."""

    def __init__(self, inner):
        self.inner, self.steps = inner, 0
        if hasattr(inner, "get_range"):
            self.get_range = self._get_range

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, index):
        item = self.inner[index]
        self.steps += len(item[0])
        return item

    def _get_range(self, index, offset, length):
        self.steps += length
        return self.inner.get_range(index, offset, length)


class NpyFiles(torch.utils.data.Dataset):
    """Item i: np.load of its data and target files, whole."""

    def __init__(self, directory, count):
        self.directory, self.count = directory, count

    def __len__(self):
        return self.count

    def __getitem__(self, i):
        data = np.load(os.path.join(self.directory, "data", f"{i:07d}.npy"))
        target = np.load(os.path.join(self.directory, "target", f"{i:07d}.npy"))
        return torch.from_numpy(data), torch.from_numpy(target)


class InMemory(torch.utils.data.Dataset):
    def __init__(self, data, target, offsets):
        self.data, self.target, self.offsets = data, target, offsets

    def __len__(self):
        return len(self.offsets) - 1

    def __getitem__(self, i):
        steps = slice(int(self.offsets[i]), int(self.offsets[i + 1]))
        return self.data[steps], self.target[steps]


def epoch(dataset, lengths):
    sampler = bload.BlockSampler(lengths, t_max=T_MAX, blocks_per_batch=BLOCKS, split=True)
    packer = bload.BlockDataset(dataset, t_max=T_MAX)
    start = time.perf_counter()
    real = 0
    for request in sampler:
        batch = packer.__getitems__(request)
        real += int(batch.table[:, bload.ops.COLUMN["length"]].sum())
    return time.perf_counter() - start, real


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gigabytes", type=float, default=1.0)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    step_bytes = args.features * 4 + 8  # float32 features, an int64 target
    rng = np.random.default_rng(0)
    lengths = []
    while sum(lengths) * step_bytes < args.gigabytes * 2**30:
        lengths.append(int(np.clip(rng.lognormal(np.log(300), 0.9), 1, 8 * T_MAX)))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    steps = int(offsets[-1])
    data = torch.randn(steps, args.features)
    target = torch.randint(0, 10, (steps,))
    print(
        f"{len(lengths):,} sequences, {steps:,} steps of {step_bytes} bytes ({steps * step_bytes / 2**30:.2f} GiB); "
        f"t_max {T_MAX}, {BLOCKS} blocks a batch, split; one process, page cache warm (second epoch of each)"
    )
    lengths = torch.tensor(lengths)
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        items = (
            (data[offsets[i] : offsets[i + 1]], target[offsets[i] : offsets[i + 1]])
            for i in range(len(lengths))
        )
        store = bload.SequenceStore(
            bload.store.write(
                os.path.join(directory, "store"), items, total=len(lengths), progress=False
            )
        )
        npy = os.path.join(directory, "npy")
        for field in ("data", "target"):
            os.makedirs(os.path.join(npy, field))
        for i in range(len(lengths)):
            np.save(
                os.path.join(npy, "data", f"{i:07d}.npy"), data[offsets[i] : offsets[i + 1]].numpy()
            )
            np.save(
                os.path.join(npy, "target", f"{i:07d}.npy"),
                target[offsets[i] : offsets[i + 1]].numpy(),
            )
        results = {}
        for name, inner in [
            ("store (SequenceStore, its views)", store),
            ("one .npy per item (np.load, whole)", NpyFiles(npy, len(lengths))),
            ("in-memory tensors (whole items)", InMemory(data, target, offsets)),
        ]:
            # The first epoch warms the page cache and counts the steps read; the second is
            # timed on the dataset itself, as a user's BlockDataset reads it (a SequenceStore
            # through views of its mapping, which a wrapper would turn into copies).
            counted = Counted(inner)
            _, real = epoch(counted, lengths)
            seconds, _ = epoch(inner, lengths)
            results[name] = seconds
            print(
                f"  {name:<36} {seconds:7.2f} s  {real * step_bytes / seconds / 2**30:6.2f} GiB/s of real steps  "
                f"{counted.steps / real:5.2f} steps loaded per step packed"
            )
        source = torch.cat([data.view(torch.int32), target.view(torch.int32).view(-1, 2)], dim=1)
        destination = torch.empty_like(source)
        destination.copy_(source)
        start = time.perf_counter()
        destination.copy_(source)
        memcpy = time.perf_counter() - start
        store_seconds = results["store (SequenceStore, its views)"]
        print(
            f"  memcpy of the same bytes              {memcpy:7.2f} s  "
            f"{steps * step_bytes / memcpy / 2**30:6.2f} GiB/s; the store's epoch is {store_seconds / memcpy:.2f}x it"
        )


if __name__ == "__main__":
    main()
