"""flex_attention's BlockMask for packed batches: bload's block_mask() (kv-block tables the core
writes from the block table, BlockMask.from_kv_blocks) against torch's create_block_mask of the
same document mask_mod (evaluated on every [t_max, t_max] pair, then reduced to tiles), on the
same batches, for BENCHMARKS.md.

    make bench        # or, with the package installed: .venv/bin/python benches/block_mask.py
    python benches/block_mask.py --device cuda --t-max 4096 8192 --compiled   # tests/gpu/run.sh

On cuda, bload's mask is built where the batch is made (the kv-block tables from the host's
table) and moved to the GPU, as a loader does; torch's evaluates its mask_mod on the GPU. With
--compiled, torch's is also timed compiled (torch.compile(create_block_mask), its compilation
left out of the times: it runs once on the first batch first).

Lengths are lognormal (LLM-like documents, median 600 steps, sigma 1, split at t_max) planned
best_fit into batches of BLOCKS blocks. Each round builds both masks for the same BATCHES
batches, alternating which goes first; the figures are medians over ROUNDS rounds, and the two
masks are checked equal (dense form) once per case before timing.
"""

import argparse
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


def theirs(batch, make=create_block_mask):
    return make(
        document_mask(batch),
        batch.blocks,
        None,
        batch.t_max,
        batch.t_max,
        device=batch.document_ids.device,
        BLOCK_SIZE=BLOCK_SIZE,
    )


def ours(batch):
    return batch.block_mask(causal=True, block_size=BLOCK_SIZE)


def seconds(make, batches, device):
    start = time.perf_counter()
    for batch in batches:
        make(batch)
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / len(batches)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--t-max", type=int, nargs="+", default=[1024, 2048, 4096])
    parser.add_argument("--compiled", action="store_true", help="also torch's compiled")
    args = parser.parse_args()
    device = args.device
    makers = {"bload": ours, "create_block_mask": theirs}
    if args.compiled:
        compiled = torch.compile(create_block_mask)
        makers["compiled"] = lambda batch: theirs(batch, compiled)
    heads = " ".join(f"{name + '_ms':>21}" for name in makers)
    print(f"{'t_max':>6} {'blocks':>6} {heads} {'ratios (theirs / bload)':>24}", flush=True)
    print(
        f"(median of {ROUNDS} rounds of {BATCHES} batches, {device}, BLOCK_SIZE {BLOCK_SIZE}, "
        "causal document mask)",
        flush=True,
    )
    for t_max in args.t_max:
        planned = lengths(BATCHES * BLOCKS * t_max // 500, t_max)
        sampler = bload.BlockSampler(planned, t_max, BLOCKS, split=True)
        dataset = bload.BlockDataset(Steps(planned), t_max)
        made = [dataset.__getitems__(request) for _, request in zip(range(BATCHES), sampler)]
        # bload's from the batch as the loader makes it (on the host), moved to the device;
        # torch's from the document ids on the device. Both read tables made before the clock.
        batches = [batch.to(device) if device != "cpu" else batch for batch in made]
        for batch in batches:
            batch.document_ids  # noqa: B018
        dense = theirs(batches[0]).to_dense()
        for name, make in makers.items():  # equal masks; the compiled one compiles here
            assert torch.equal(make(batches[0]).to_dense(), dense), f"{name}'s mask differs"
        times = {name: [] for name in makers}
        for round in range(ROUNDS):
            order = list(makers) if round % 2 == 0 else list(reversed(makers))
            for name in order:
                times[name].append(seconds(makers[name], batches, device))
        medians = {name: statistics.median(values) for name, values in times.items()}
        cells = " ".join(f"{medians[name] * 1e3:>21.2f}" for name in makers)
        ratios = ", ".join(
            f"{medians[name] / medians['bload']:.1f}x" for name in makers if name != "bload"
        )
        print(f"{t_max:>6} {BLOCKS:>6} {cells} {ratios:>24}", flush=True)


if __name__ == "__main__":
    main()
