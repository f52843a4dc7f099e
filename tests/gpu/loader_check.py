"""tests/gpu/run.sh's loader step: bload's DataLoader with pinned memory (on cuda), each batch
moved with .to(device, non_blocking=True), checked equal, field by field, to the same batches
loaded on the CPU without workers, the fields made from the table (reset, valid, ...) on the
device too.

    python tests/gpu/loader_check.py --device cuda     # --device cpu: the same without pinning
"""

import argparse
import pathlib
import sys

import bload
import torch
from torch.utils.data import DataLoader, Dataset

LENGTHS = (
    pathlib.Path(__file__).resolve().parents[2] / "examples" / "data" / "action_genome_like.lengths"
)
T_MAX, BLOCKS = 94, 8


class Numbered(Dataset):
    """Item i: data [T_i, 4] holding i * 1000 + step, target [T_i] holding i."""

    def __init__(self, lengths):
        self.lengths = lengths.tolist()

    def __len__(self):
        return len(self.lengths)

    def __getitem__(self, i):
        steps = torch.arange(self.lengths[i], dtype=torch.float32) + 1000 * i
        return steps.unsqueeze(1).repeat(1, 4), torch.full((self.lengths[i],), i)


def loader(lengths, workers, pin_memory):
    sampler = bload.BlockSampler(lengths, T_MAX, BLOCKS, world_size=1, rank=0, seed=0)
    dataset = bload.BlockDataset(Numbered(lengths), T_MAX, target_padding=-1)
    return DataLoader(
        dataset,
        batch_sampler=sampler,
        collate_fn=bload.collate,
        num_workers=workers,
        pin_memory=pin_memory,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--sequences", type=int, default=600)
    device = parser.parse_args().device
    lengths = bload.read_lengths(LENGTHS)[: parser.parse_args().sequences]
    pinned = device == "cuda"
    batches = 0
    for got, want in zip(loader(lengths, 2, pinned), loader(lengths, 0, False), strict=True):
        if pinned and not (got.data.is_pinned() and got.target.is_pinned()):
            sys.exit(
                f"batch {batches}: DataLoader(pin_memory=True) gave a batch that is not pinned"
            )
        moved = got.to(device, non_blocking=True)
        fields = {"data": moved.data, "target": moved.target, **moved.tables()}
        if device == "cuda":
            torch.cuda.synchronize()
        for name, tensor in fields.items():
            if tensor.device.type != device:
                sys.exit(f"batch {batches}: {name} is on {tensor.device}, expected {device}")
            if not torch.equal(tensor.cpu(), getattr(want, name)):
                sys.exit(
                    f"batch {batches}: {name} on {device} differs from the batch loaded on the CPU"
                )
        batches += 1
    print(
        f"loader: {batches} batches of {BLOCKS} x {T_MAX} steps from {len(lengths)} sequences, 2 workers, "
        f"pin_memory={pinned}, .to({device!r}, non_blocking=True): every field equal to the CPU's batches, "
        f"{len(fields)} fields on {device}"
    )


if __name__ == "__main__":
    main()
