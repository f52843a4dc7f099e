"""flex_attention's BlockMask for packed batches: bload's block_mask() (kv-block tables the core
writes from the block table, BlockMask.from_kv_blocks) against torch's create_block_mask of the
same document mask_mod (evaluated on every [t_max, t_max] pair, then reduced to tiles), on the
same batches, on the CPU, for BENCHMARKS.md.

    make bench        # or, with the package installed: .venv/bin/python benches/block_mask.py

Lengths are lognormal (LLM-like documents, median 600 steps, sigma 1, split at t_max) planned
best_fit into batches of BLOCKS blocks. Each round builds both masks for the same BATCHES
batches, alternating which goes first; the figures are medians over ROUNDS rounds, and the two
masks are checked equal (dense form) once per case before timing.
"""

import statistics
import time

import bload
import torch
from torch.nn.attention.flex_attention import create_block_mask

ROUNDS, BATCHES, BLOCKS, BLOCK_SIZE = 5, 2, 4, 128


def lengths(count, t_max, seed=0):
    generator = torch.Generator().manual_seed(seed)
    drawn = torch.exp(torch.randn(count, generator=generator) + torch.log(torch.tensor(600.0)))
    return drawn.clamp(1, 4 * t_max).long().tolist()


class Steps(torch.utils.data.Dataset):
    """Item i: (zeros [T_i, 1], zeros [T_i]): the masks need the table alone."""

    def __init__(self, lengths):
        self.lengths = lengths

    def __len__(self):
        return len(self.lengths)

    def __getitem__(self, i):
        return torch.zeros(self.lengths[i], 1), torch.zeros(self.lengths[i])


def document_mask(batch):
    ids = batch.document_ids

    def mask_mod(b, h, q, kv):
        return (ids[b, q] == ids[b, kv]) & (q >= kv)

    return mask_mod


def theirs(batch):
    return create_block_mask(
        document_mask(batch),
        batch.blocks,
        None,
        batch.t_max,
        batch.t_max,
        device="cpu",
        BLOCK_SIZE=BLOCK_SIZE,
    )


def ours(batch):
    return batch.block_mask(causal=True, block_size=BLOCK_SIZE)


def seconds(make, batches):
    start = time.perf_counter()
    for batch in batches:
        make(batch)
    return (time.perf_counter() - start) / len(batches)


def main():
    print(
        f"{'t_max':>6} {'blocks':>6} {'bload_ms':>9} {'create_block_mask_ms':>21} {'ratio':>7}",
        flush=True,
    )
    print(
        f"(median of {ROUNDS} rounds of {BATCHES} batches, CPU, BLOCK_SIZE {BLOCK_SIZE}, causal document mask)",
        flush=True,
    )
    for t_max in (1024, 2048, 4096):
        planned = lengths(BATCHES * BLOCKS * t_max // 500, t_max)
        sampler = bload.BlockSampler(planned, t_max, BLOCKS, split=True)
        dataset = bload.BlockDataset(Steps(planned), t_max)
        batches = [dataset.__getitems__(request) for _, request in zip(range(BATCHES), sampler)]
        for batch in batches:
            batch.document_ids  # noqa: B018 (the tables both masks read, made before the clock)
        assert torch.equal(ours(batches[0]).to_dense(), theirs(batches[0]).to_dense())
        times = {"ours": [], "theirs": []}
        for round in range(ROUNDS):
            order = ["ours", "theirs"] if round % 2 == 0 else ["theirs", "ours"]
            for name in order:
                times[name].append(seconds(ours if name == "ours" else theirs, batches))
        mine, torch_s = statistics.median(times["ours"]), statistics.median(times["theirs"])
        print(
            f"{t_max:>6} {BLOCKS:>6} {mine * 1e3:>9.2f} {torch_s * 1e3:>21.2f} {torch_s / mine:>6.1f}x",
            flush=True,
        )


if __name__ == "__main__":
    main()
