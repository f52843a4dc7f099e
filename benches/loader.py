"""A PyTorch DataLoader with 2 workers: bload's packed batches against the padded loader most
code uses, on the same 100k sequences, side by side, for BENCHMARKS.md.

    make bench        # or, with the package installed: .venv/bin/python benches/loader.py

The sequences are lognormal lengths (median 90, at most T_MAX) of 16 float32 features and an
int64 target per step, held in memory as views of one tensor, so reading an item costs nothing
and the figures are the loaders' own. bload: BlockSampler (best_fit, B blocks of T_MAX a batch),
BlockDataset, collate_fn=bload.collate. Padded: the sequences shuffled, as many a batch as
bload's batches hold on average (so both loaders serve the epoch in the same number of batches),
each batch padded to its longest with a mask (torch's pad_sequence). The loop reads what a
training step reads: the data, the target and the mask of real steps (`batch.valid`, which bload
makes in the main process from the table). Rounds of BATCHES batches (timed after the workers
started) alternate between the loaders; the figures are medians over ROUNDS rounds.
"""

import statistics
import time

import bload
import torch
from padded_batches import pad_collate_with_mask

SEQUENCES, T_MAX, BLOCKS, FEATURES = 100_000, 512, 8, 16
ROUNDS, BATCHES, WORKERS = 5, 200, 2


class Sequences(torch.utils.data.Dataset):
    """Item i: (features [T_i, FEATURES], targets [T_i]), views of two tensors."""

    def __init__(self, lengths):
        self.lengths = lengths
        self.starts = [0]
        for length in lengths:
            self.starts.append(self.starts[-1] + length)
        generator = torch.Generator().manual_seed(0)
        self.data = torch.randn(self.starts[-1], FEATURES, generator=generator)
        self.target = torch.randint(0, 10, (self.starts[-1],), generator=generator)

    def __len__(self):
        return len(self.lengths)

    def __getitem__(self, i):
        steps = slice(self.starts[i], self.starts[i + 1])
        return self.data[steps], self.target[steps]


def ms_per_batch(loader, read):
    """One round: the time per batch over BATCHES batches, the workers started before the clock."""
    batches = iter(loader)
    read(next(batches))  # starts the workers
    start = time.perf_counter()
    for _, batch in zip(range(BATCHES), batches):
        read(batch)
    seconds = time.perf_counter() - start
    del batches
    return seconds * 1000 / BATCHES


def main():
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    lengths = torch.distributions.LogNormal(4.5, 0.8).sample((SEQUENCES,)).round().clamp(1, T_MAX)
    lengths = [int(n) for n in lengths]
    dataset = Sequences(lengths)
    sampler = bload.BlockSampler(lengths, T_MAX, BLOCKS, seed=0)
    packed = torch.utils.data.DataLoader(
        bload.BlockDataset(dataset, T_MAX),
        batch_sampler=sampler,
        collate_fn=bload.collate,
        num_workers=WORKERS,
    )
    per_batch = round(SEQUENCES / len(sampler))
    padded = torch.utils.data.DataLoader(
        dataset,
        batch_size=per_batch,
        shuffle=True,
        collate_fn=pad_collate_with_mask,
        num_workers=WORKERS,
        generator=generator,
    )

    def read_packed(batch):
        return batch.data.sum() + batch.target.sum() + batch.valid.sum()

    def read_padded(batch):
        data, target, valid = batch
        return data.sum() + target.sum() + valid.sum()

    # Rounds alternate between the loaders, so the machine's load falls on both alike.
    rounds = [
        (ms_per_batch(packed, read_packed), ms_per_batch(padded, read_padded))
        for _ in range(ROUNDS)
    ]
    bload_ms = statistics.median(ms for ms, _ in rounds)
    padded_ms = statistics.median(ms for _, ms in rounds)
    print(
        f"{SEQUENCES} sequences (lognormal, at most {T_MAX} steps, {FEATURES} features), "
        f"DataLoader with {WORKERS} workers, median of {ROUNDS} rounds of {BATCHES} batches"
    )
    print(f"{'loader':<44} {'ms/batch':>9}")
    print(f"{f'bload ({BLOCKS} x {T_MAX} a batch, {len(sampler)} batches)':<44} {bload_ms:>9.3f}")
    print(f"{f'padded ({per_batch} sequences a batch)':<44} {padded_ms:>9.3f}")
    ratio = statistics.median(ours / theirs for ours, theirs in rounds)
    print(
        f"bload / padded: {bload_ms / padded_ms:.2f}x of the medians, {ratio:.2f}x the median of the rounds' ratios "
        "(target at most 1.25x)"
    )


if __name__ == "__main__":
    main()
