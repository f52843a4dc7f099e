"""Packed batches for every DDP rank through torch.utils.data.DataLoader: the Python usage in
README.md. Run from the repository root after `make plugin`:

    .venv/bin/python examples/python_loader.py
"""

import collections.abc
import numbers
import os

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
torch.ops.load_library(os.environ.get("BLOAD_LIBRARY", os.path.join(ROOT, "build", "libbload.so")))

T_MAX, BLOCKS, WORLD_SIZE = 94, 8, 2
# Where a block table row keeps each value: the core's column layout, by name.
COLUMNS = torch.ops.bload.table_columns()
SEQUENCE, LENGTH = COLUMNS.index("sequence"), COLUMNS.index("length")
# Rounding can leave a rank a batch with no piece (only empty blocks). Its data still needs one
# example's trailing shape and dtype, as C++'s BlockDataset loads example 0 for it: the sampler
# yields this row instead, of length 0 (never a piece's), which the dataset serves as any row
# (sequence 0) and PackBlocks takes for the shape alone.
SHAPE_DONOR = [0] * len(COLUMNS)


def read_lengths(path):
    """A lengths file, read by bload's one reader (README, "Lengths files")."""
    return torch.ops.bload.read_lengths(path).tolist()


def int64_argument(name, value, minimum=-(2**63)):
    """`value` as an int64 from `minimum` on, or a TypeError or ValueError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} = {value!r}: expected an int")
    if not minimum <= value < 2**63:
        raise ValueError(f"{name} = {value}: expected an int from {minimum} to {2**63 - 1}")
    return int(value)


class BlockBatch(list):
    """One batch of one rank: its block table rows. A DataLoader given the sampler as
    batch_sampler= hands the dataset one row at a time; given it as sampler=, it would hand the
    dataset whole batches, which `table_row` refuses."""


def table_row(index):
    """The block table row a DataLoader hands the dataset, checked: a dataset calls it first."""
    if isinstance(index, BlockBatch):
        raise TypeError(
            "the dataset was handed a whole bload batch: pass BlockBatchSampler to the DataLoader "
            "as batch_sampler=, not sampler= (a bload batch is always blocks_per_batch blocks: set "
            "blocks_per_batch in the Planner, not the DataLoader's batch_size)"
        )
    return index


class BlockBatchSampler(torch.utils.data.Sampler):
    """One rank's batches of an epoch, each a BlockBatch of block table rows, for a DataLoader's
    batch_sampler=.

    state_dict() and load_state_dict() save and restore the place in the epoch, also onto another
    world size (a planner for it): the rest of the epoch is then the blocks not yet served, dealt
    to the new ranks. `position` counts the batches handed to the DataLoader, which with workers
    fetches some ahead of the training loop: to resume after the batches trained, save those
    (`state | {"position": trained}`)."""

    def __init__(self, planner, rank):
        self.planner, self.rank = planner, rank
        self._start(0)

    def set_epoch(self, epoch):
        """Serves `epoch` next: from its start, or, for the epoch being served part-way (as after
        load_state_dict), from where it is."""
        epoch = int64_argument("epoch", epoch, minimum=0)
        if epoch != self.epoch or self._served():
            self._start(epoch)

    def __len__(self):
        """Batches the next iteration yields: the rest of the epoch, or all of it once served."""
        if self._served():
            return self.planner.batches_per_rank(self.epoch)
        return self.plan.batches_per_rank() - self.position

    def __iter__(self):
        if self._served():  # an epoch served to its end is served again, from its start
            self._start(self.epoch)
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            self.check_agreement()
        while self.position < self.plan.batches_per_rank():
            # A batch of empty blocks still loads one example: its shape and dtype make the padding.
            batch = BlockBatch(self.plan.batch(self.rank, self.position).tolist() or [SHAPE_DONOR])
            self.position += 1
            yield batch

    def check_agreement(self):
        """Before the epoch's first batch, every rank checks that all plan this same epoch (the
        lengths, every option, the epoch, the plan's hash): one all-gather, then a RuntimeError
        on every rank naming what differs, e.g. "ranks disagree on seed: rank 0 has 0, ...". """
        gathered = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(gathered, self.planner.agreement(self.epoch).tolist())
        self.planner.check_agreement(self.epoch, torch.tensor(gathered))

    def _start(self, epoch):
        self.epoch, self.plan, self.position = epoch, self.planner.plan(epoch), 0

    def _served(self):
        return self.position == self.plan.batches_per_rank()

    def state_dict(self):
        """epoch, position (batches served), world_size, and where the epoch's blocks come from:
        the plan for planned_world_size ranks from first_block on (this world size's from 0,
        unless the epoch was resumed from another)."""
        at = self.plan.position(self.position)
        return {
            "epoch": at["epoch"],
            "position": at["batches"],
            "world_size": at["world_size"],
            "planned_world_size": at["planned_world_size"],
            "first_block": at["first_block"],
        }

    def load_state_dict(self, state):
        """Goes on from `state`, saved by state_dict() with the same lengths and options and any
        world size (planned_world_size and first_block default to a plan of the saved world
        size's own). A state that is not such a dict (not a mapping, a field missing or not an int) is
        a TypeError or ValueError naming it, a value out of bounds a RuntimeError naming the field
        and its bounds; either way the sampler is left as it was."""
        if not isinstance(state, collections.abc.Mapping):
            raise TypeError(f"state: expected the dict state_dict() returns, got {type(state).__name__}")
        missing = [name for name in ("epoch", "position", "world_size") if name not in state]
        if missing:
            raise ValueError(f"state: no {', '.join(missing)}: expected the dict state_dict() returns")
        value = {name: int64_argument(f"state[{name!r}]", state[name]) for name in state}
        world_size = value["world_size"]
        position = {
            "epoch": value["epoch"],
            "batches": value["position"],
            "world_size": world_size,
            "planned_world_size": value.get("planned_world_size", world_size),
            "first_block": value.get("first_block", 0),
        }
        self.plan, self.position = self.planner.resume(position)
        self.epoch = value["epoch"]


class Clips(torch.utils.data.Dataset):
    """Variable-length sequences: features [T_i, 16] and a label per step [T_i]."""

    def __init__(self, lengths):
        self.lengths = lengths

    def __len__(self):
        return len(self.lengths)

    def __getitem__(self, index):
        row = table_row(index)
        steps = self.lengths[row[SEQUENCE]]
        return row, torch.randn(steps, 16), torch.randint(0, 10, (steps,))


class PackBlocks:
    """A DataLoader collate_fn: the (table row, data [T_i, ...], target [T_i, ...]) items of one
    batch, in table order, packed into [blocks, t_max, ...] with the masks a recurrent model needs.
    A batch with no piece (its one item a SHAPE_DONOR's) is padding only, with an empty table."""

    def __init__(self, blocks, t_max, data_padding=0.0, target_padding=-100):
        self.blocks, self.t_max = blocks, t_max
        self.data_padding, self.target_padding = data_padding, target_padding

    def __call__(self, items):
        if not items:
            raise ValueError("items: an empty batch: expected a block table's rows (a batch with no piece "
                             "brings BlockBatchSampler's SHAPE_DONOR row)")  # fmt: skip
        pieces = [item for item in items if item[0][LENGTH] > 0]  # all but a SHAPE_DONOR
        table = torch.tensor([row for row, _, _ in pieces], dtype=torch.int64).reshape(len(pieces), len(COLUMNS))
        shape = (table, self.blocks, self.t_max)
        return {
            "table": table,
            "data": self.pack([x for _, x, _ in pieces or items], table, self.data_padding),
            "target": self.pack([y for _, _, y in pieces or items], table, self.target_padding),
            "reset": torch.ops.bload.reset_mask(*shape),
            "valid": torch.ops.bload.valid_mask(*shape),
        }

    def pack(self, sequences, table, padding):
        if len(table) == 0:  # padding only, shaped and typed like the shape donor's steps
            like = sequences[0]
            return torch.full((self.blocks, self.t_max, *like.shape[1:]), padding, dtype=like.dtype)
        return torch.ops.bload.pack(sequences, table, self.blocks, self.t_max, padding)


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
