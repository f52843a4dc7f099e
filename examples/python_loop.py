"""The shortest complete training loop with bload (README, "Python"): a GRU on packed blocks of
variable-length clips, its state restarted wherever a sequence starts. `make test` runs it on one
process and, under torchrun, as 2 DDP ranks (gloo):

    python examples/python_loop.py
    torchrun --nproc-per-node 2 examples/python_loop.py
    python examples/python_loop.py --store DIR   # the clips read from a sequence store

With --store, the clips are written once to a sequence store at DIR (bload.store.write; rank 0,
when DIR does not exist yet), and the loader packs from it (bload.SequenceStore, docs/data.md).
"""

import gc
import os
import sys

import bload
import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

LENGTHS = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "data", "action_genome_like.lengths"
)


class Clips(torch.utils.data.Dataset):
    """An ordinary map-style dataset: clip i is (features [T_i, 16], target [T_i, 1]), the target
    the running mean of feature 0."""

    def __init__(self, lengths):
        self.lengths = lengths.tolist()

    def __len__(self):
        return len(self.lengths)

    def __getitem__(self, i):
        x = torch.randn(self.lengths[i], 16, generator=torch.Generator().manual_seed(i))
        return x, x[:, :1].cumsum(0) / torch.arange(1, len(x) + 1).unsqueeze(1)


class GRU(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.cell, self.head = torch.nn.GRUCell(16, 32), torch.nn.Linear(32, 1)

    def forward(self, data, reset):  # data [blocks, t_max, 16], reset [blocks, t_max]
        h, out = data.new_zeros(len(data), 32), []
        for t in range(data.size(1)):
            h = self.cell(data[:, t], h * ~reset[:, t, None])  # a new sequence starts from zero
            out.append(self.head(h))
        return torch.stack(out, 1)


def main():
    if "RANK" in os.environ:  # under torchrun
        torch.distributed.init_process_group("gloo")
    lengths = bload.read_lengths(LENGTHS)[:1000]
    dataset = Clips(lengths)
    if "--store" in sys.argv:
        path = sys.argv[sys.argv.index("--store") + 1]
        if not os.path.exists(path) and int(os.environ.get("RANK", 0)) == 0:
            bload.store.write(path, dataset, progress=False)
        if torch.distributed.is_initialized():
            torch.distributed.barrier()
        dataset = bload.SequenceStore(path)
        lengths = dataset.lengths
    # Rank and world size come from torch.distributed, as DistributedSampler's do.
    sampler = bload.BlockSampler(lengths, t_max=94, blocks_per_batch=8, seed=0)
    loader = DataLoader(
        bload.BlockDataset(dataset, t_max=94),
        batch_sampler=sampler,
        collate_fn=bload.collate,
        num_workers=2,
    )
    torch.manual_seed(0)  # the same weights every run (DDP also starts every rank from rank 0's)
    model = GRU()
    if torch.distributed.is_initialized():
        model = DistributedDataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for batch in loader:  # a bload.PackedBatch, the same shape on every rank
            error = (model(batch.data, batch.reset) - batch.target)[batch.valid]
            loss = error.pow(2).sum() / max(len(error), 1)  # a batch may be padding only
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        stats = sampler.stats()
        print(
            f"rank {sampler.rank}: epoch {epoch}: {len(sampler)} batches, loss {loss.item():.4f}, "
            f"padding {100 * stats['padding'] / (stats['blocks'] * 94):.2f}%, plan {sampler.plan_hash()}"
        )
    if torch.distributed.is_initialized():
        # DDP holds the process group: freed here, gloo's threads end while the interpreter lives
        # (docs/ddp.md, step 7).
        del model
        gc.collect()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
