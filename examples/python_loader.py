"""Packed batches for every DDP rank through torch.utils.data.DataLoader: the Python usage in
README.md. Run from the repository root after `make plugin`:

    .venv/bin/python examples/python_loader.py
"""

import os

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
torch.ops.load_library(os.environ.get("BLOAD_LIBRARY", os.path.join(ROOT, "build", "libbload.so")))

T_MAX, BLOCKS, WORLD_SIZE = 94, 8, 2
# Where a block table row keeps each value: the core's column layout, by name.
SEQUENCE = torch.ops.bload.table_columns().index("sequence")


def read_lengths(path):
    """A lengths file, read by bload's one reader (README, "Lengths files")."""
    return torch.ops.bload.read_lengths(path).tolist()


class BlockBatchSampler(torch.utils.data.Sampler):
    """One rank's batches of an epoch: each a block table, as a list of rows."""

    def __init__(self, planner, rank):
        self.planner, self.rank, self.epoch = planner, rank, 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __len__(self):
        return self.planner.batches_per_rank(self.epoch)

    def __iter__(self):
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            self.check_agreement()
        for index in range(len(self)):
            yield self.planner.batch(self.epoch, self.rank, index).tolist()

    def check_agreement(self):
        """Before the epoch's first batch, every rank checks that all plan this same epoch (the
        lengths, every option, the epoch, the plan's hash): one all-gather, then a RuntimeError
        on every rank naming what differs, e.g. "ranks disagree on seed: rank 0 has 0, ...". """
        gathered = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(gathered, self.planner.agreement(self.epoch).tolist())
        self.planner.check_agreement(self.epoch, torch.tensor(gathered))


class Clips(torch.utils.data.Dataset):
    """Variable-length sequences: features [T_i, 16] and a label per step [T_i]."""

    def __init__(self, lengths):
        self.lengths = lengths

    def __len__(self):
        return len(self.lengths)

    def __getitem__(self, row):  # a block table row
        steps = self.lengths[row[SEQUENCE]]
        return row, torch.randn(steps, 16), torch.randint(0, 10, (steps,))


class PackBlocks:
    """A DataLoader collate_fn: the (table row, data [T_i, ...], target [T_i, ...]) items of one
    batch, in table order, packed into [blocks, t_max, ...] with the masks a recurrent model needs."""

    def __init__(self, blocks, t_max, data_padding=0.0, target_padding=-100):
        self.blocks, self.t_max = blocks, t_max
        self.data_padding, self.target_padding = data_padding, target_padding

    def __call__(self, items):
        table = torch.tensor([row for row, _, _ in items])
        shape = (table, self.blocks, self.t_max)
        return {
            "table": table,
            "data": torch.ops.bload.pack([x for _, x, _ in items], *shape, self.data_padding),
            "target": torch.ops.bload.pack([y for _, _, y in items], *shape, self.target_padding),
            "reset": torch.ops.bload.reset_mask(*shape),
            "valid": torch.ops.bload.valid_mask(*shape),
        }


def main():
    lengths = read_lengths(os.path.join(ROOT, "examples", "data", "action_genome_like.lengths"))
    planner = torch.classes.bload.Planner(
        torch.tensor(lengths), T_MAX, blocks_per_batch=BLOCKS, world_size=WORLD_SIZE, seed=0
    )
    for rank in range(WORLD_SIZE):  # each DDP process runs one rank
        sampler = BlockBatchSampler(planner, rank)
        sampler.set_epoch(0)
        loader = torch.utils.data.DataLoader(
            Clips(lengths), batch_sampler=sampler, collate_fn=PackBlocks(BLOCKS, T_MAX), num_workers=2
        )
        batches = sum(1 for batch in loader)
        print(f"rank {rank}: {batches} batches of [{BLOCKS}, {T_MAX}, 16]")
    stats = planner.stats(0)
    print(f"padding: {stats['padding']} of {stats['blocks'] * T_MAX} steps")


if __name__ == "__main__":
    main()
