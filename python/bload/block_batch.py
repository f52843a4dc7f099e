"""What a BlockSampler hands a DataLoader for each batch (BlockBatch), and the fingerprint of a
plan as the sampler and the command line show it (PlanHash)."""

import ctypes
import dataclasses

import torch

__all__ = ["BlockBatch", "PlanHash", "SAMPLER_NOT_BATCH_SAMPLER"]


class PlanHash(int):
    """A plan's fingerprint: an unsigned 64-bit int, shown as the CLI shows it (0x + 16 digits)."""

    def __repr__(self):
        return f"{int(self):#018x}"

    __str__ = __repr__


@dataclasses.dataclass(frozen=True)
class BlockBatch:
    """What BlockSampler hands the DataLoader for one batch: batch `index` of `epoch` for one
    rank, as its block table (int64 [pieces, 6], see bload.ops) of `blocks` blocks of `t_max`
    steps. bload.BlockDataset turns it into a PackedBatch."""

    table: torch.Tensor
    blocks: int
    t_max: int
    epoch: int
    index: int
    #: Each row carries its recurrent state from the previous batch (policy "lanes").
    carry: bool = False
    #: The lane of row 0, rank * blocks: row j is lane first_lane + j.
    first_lane: int = 0
    #: Sequences in the lengths planned (0: not known): BlockDataset refuses a dataset of
    #: another size, naming both, before reading out of its range.
    sequences: int = 0
    #: The sampler's read_ahead, and the tables of the batches after this one (as many, fewer at
    #: the epoch's end): BlockDataset starts their reads through the dataset's hook.
    read_ahead: int = 0
    ahead: tuple = ()
    #: The global batch it is part of (every rank's batch `index` together), from the plan:
    #: (valid steps, pieces, loss_scale, shifted_loss_scale); None when not known.
    global_batch: tuple = None

    def __iter__(self):  # a DataLoader iterates a batch only for a dataset without __getitems__
        raise TypeError(
            "a bload batch reached a dataset that cannot load it: wrap the dataset in "
            "bload.BlockDataset (and pass BlockSampler as batch_sampler=, not sampler=)"
        )

    def __index__(self):
        # A batch used as an index: a DataLoader given the sampler as sampler= with batch_size=None
        # hands each batch to the dataset's __getitem__, whose list or tensor asks for this.
        raise TypeError(SAMPLER_NOT_BATCH_SAMPLER)

    # Sent to a DataLoader worker with its tables' bytes in the pickle (table_to_pickle).
    def __reduce__(self):
        fields = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        fields["table"] = table_to_pickle(self.table)
        fields["ahead"] = tuple(table_to_pickle(table) for table in self.ahead)
        return (_rebuild_block_batch, (fields,))


def _rebuild_block_batch(fields):
    fields["table"] = table_from_pickle(fields["table"])
    fields["ahead"] = tuple(table_from_pickle(table) for table in fields["ahead"])
    return BlockBatch(**fields)


@dataclasses.dataclass(frozen=True)
class _TableBytes:
    """A tensor's bytes, shape and dtype, as table_to_pickle pickles a block table."""

    data: bytes
    shape: tuple
    dtype: torch.dtype


def table_to_pickle(table):
    """A block table as it is pickled to or from a DataLoader worker: its bytes (a table on the
    host; anything else as it is). Between processes torch pickles a tensor as a shared memory
    segment, whose descriptor the receiver then asks the sender for over a socket; for a table of
    a few kilobytes that costs far more than the bytes, and it is paid in the main process, which
    serves every worker (benches/loader.py; docs/benchmarks/loading.md)."""
    if isinstance(table, torch.Tensor) and table.device.type == "cpu" and not table.requires_grad:
        table = table.contiguous()
        # Read where they lie: NumPy, whose arrays would pickle as bytes too, is not among bload's
        # requirements.
        data = ctypes.string_at(table.data_ptr(), table.numel() * table.element_size())
        return _TableBytes(data, tuple(table.shape), table.dtype)
    return table


def table_from_pickle(table):
    """table_to_pickle's table as a tensor again."""
    if not isinstance(table, _TableBytes):
        return table
    if not table.data:
        return torch.empty(table.shape, dtype=table.dtype)
    return torch.frombuffer(bytearray(table.data), dtype=table.dtype).reshape(table.shape)


#: The error of a BlockSampler passed to a DataLoader as sampler=: each BlockBatch then reaches
#: the dataset as if it were an index.
SAMPLER_NOT_BATCH_SAMPLER = (
    "a bload.BlockBatch was used as a sequence's index: pass bload.BlockSampler to the DataLoader "
    "as batch_sampler= (not sampler=), with bload.BlockDataset(dataset, t_max) as the dataset and "
    "collate_fn=bload.collate"
)
