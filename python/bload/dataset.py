"""BlockDataset and PackedBatch: an ordinary map-style dataset of variable-length sequences,
served as packed batches of the blocks BlockSampler plans.

The packing is the core's (bload.ops.pack and the per-step tables), as in C++'s
bload::BlockDataset, whose PackedBatch has the same fields. It runs where the dataset is read: in
the DataLoader's workers when there are any.
"""

import dataclasses
import sys
from typing import Dict, Union

import torch

from bload import _library, ops
from bload.sampler import BlockBatch

_library.load()

__all__ = ["BlockDataset", "PackedBatch", "collate"]

Tensor = torch.Tensor
Steps = Union[Tensor, Dict[str, Tensor]]  # a sequence's data or target: [T, ...], or a dict of them


def _map(value, function):
    if isinstance(value, dict):
        return {key: function(item) for key, item in value.items()}
    return function(value)


@dataclasses.dataclass
class PackedBatch:
    """One packed batch of one rank; every per-step tensor is [blocks, t_max, ...].

    data, target: the dataset's data and targets packed (a dict of such where the dataset's were
        dicts); padding steps hold data_padding and target_padding.
    reset: bool, true at the first step of every piece, where recurrent state starts from zero
        (with policy "lanes", only where a sequence starts: a piece that continues its sequence
        goes on from the state its row carried).
    valid: bool, true on real steps.
    ends: bool, true at the last step of every sequence.
    carry: bool [blocks], true where the row's first step continues the state the row (its lane)
        had at the end of the previous batch: keep that state, zero the others'. All false unless
        the policy is "lanes".
    lanes: int64 [blocks], the lane of every row (rank * blocks + row).
    segment_ids: int32, the piece's index inside its block, -1 on padding.
    position_ids: int64, the step's index in its sequence, 0 on padding.
    cu_seqlens: int32 [pieces + 1], flash-attention's varlen offsets.
    indices: int64 [pieces], the dataset index of every piece.
    table: int64 [pieces, 6], the block table (see bload.ops); stays on the CPU.
    """

    data: Steps
    target: Steps
    reset: Tensor
    valid: Tensor
    ends: Tensor
    carry: Tensor
    lanes: Tensor
    segment_ids: Tensor
    position_ids: Tensor
    cu_seqlens: Tensor
    indices: Tensor
    table: Tensor

    def _apply(self, function):
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "table"}
        return dataclasses.replace(self, **{name: _map(value, function) for name, value in fields.items()})

    def to(self, device, non_blocking=False):
        """The batch on `device` (the table stays on the CPU, where the operators read it)."""
        return self._apply(lambda tensor: tensor.to(device, non_blocking=non_blocking))

    def pin_memory(self, device=None):
        """The batch in pinned memory: DataLoader(pin_memory=True) calls it."""
        del device  # pinned for the current accelerator, as torch.Tensor.pin_memory() does
        return self._apply(lambda tensor: tensor.pin_memory())


def collate(batch):
    """The DataLoader's collate_fn for BlockDataset: the batch is packed already."""
    if not isinstance(batch, PackedBatch):
        raise TypeError(
            f"collate: expected the PackedBatch bload.BlockDataset makes, got {type(batch).__name__}"
            " (pass BlockSampler as batch_sampler= and bload.BlockDataset as the dataset)"
        )
    return batch


class BlockDataset(torch.utils.data.Dataset):
    """Wraps a map-style dataset whose item i is (data_i, target_i), each a tensor [T_i, ...] or a
    dict of them (T_i: sequence i's length, as in the lengths BlockSampler plans with), and serves
    the BlockBatches BlockSampler yields as PackedBatches. A dataset that can read part of a
    sequence defines `get_range(index, offset, length)`, returning the same pair for steps
    [offset, offset + length) only: it is then asked for the packed steps alone, never for a
    whole sequence split across batches. Other datasets are read whole, once per sequence per
    batch.

        loader = DataLoader(BlockDataset(dataset, t_max), batch_sampler=sampler,
                            collate_fn=bload.collate, num_workers=2, pin_memory=True)
    """

    def __init__(self, dataset, t_max, *, data_padding=0.0, target_padding=-100):
        self.dataset = dataset
        self._reads_ranges = callable(getattr(dataset, "get_range", None))
        self._buffers = _Buffers()
        self.t_max = t_max
        self.data_padding, self.target_padding = data_padding, target_padding

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        raise TypeError(
            f"BlockDataset[{index!r}]: BlockDataset serves whole batches: pass BlockSampler to the "
            "DataLoader as batch_sampler= (not sampler=, and no batch_size)"
        )

    def __getitems__(self, batch):
        if not isinstance(batch, BlockBatch):
            raise TypeError(
                f"BlockDataset was handed {type(batch).__name__} {batch!r:.80}: expected a BlockBatch "
                "from bload.BlockSampler, passed to the DataLoader as batch_sampler= (not sampler=)"
            )
        if batch.t_max != self.t_max:
            raise ValueError(
                f"t_max = {self.t_max}: the sampler plans blocks of t_max = {batch.t_max}; expected "
                "the same t_max for both"
            )
        return self.pack(batch.table, batch.blocks, carry=batch.carry, first_lane=batch.first_lane)

    @staticmethod
    def _checked(item, where, length=None, meaning=""):
        """`item`, checked to be (data, target) of `length` steps each (any length if None), the
        `meaning` of that length."""
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            raise TypeError(
                f"{where}: expected (data, target), each a tensor [T, ...] or a dict of them, got "
                f"{type(item).__name__}"
            )
        for name, steps in zip(("data", "target"), item):
            for key, tensor in (steps.items() if isinstance(steps, dict) else [(None, steps)]):
                place = f"{where} {name}" + (f"[{key!r}]" if key is not None else "")
                if not isinstance(tensor, Tensor) or tensor.dim() == 0:
                    raise TypeError(f"{place}: expected a tensor [T, ...], got {tensor!r:.60}")
                if length is not None and tensor.size(0) != length:
                    raise ValueError(f"{place} has {tensor.size(0)} steps: expected {length}, {meaning}")
        return item

    def _rows(self, table):
        """One item per table row: the piece's steps alone where the dataset reads ranges
        (get_range), else its sequence's whole item, read once per batch."""
        column = ops.COLUMN
        rows = table.tolist()
        if self._reads_ranges:
            return [
                self._checked(self.dataset.get_range(sequence, offset, length), f"dataset.get_range({sequence}, "
                              f"{offset}, {length})", length, "the length of the range asked for")
                for sequence, offset, length in (
                    (row[column["sequence"]], row[column["offset"]], row[column["length"]]) for row in rows
                )
            ]  # fmt: skip
        items = {}
        for row in rows:
            sequence = row[column["sequence"]]
            if sequence not in items:
                items[sequence] = self._checked(self.dataset[sequence], f"dataset[{sequence}]",
                                                row[column["sequence_length"]],
                                                "the sequence's length in the lengths the sampler plans with")  # fmt: skip
        return [items[row[column["sequence"]]] for row in rows]

    def pack(self, table, blocks, *, carry=False, first_lane=0):
        """The PackedBatch of a block table's pieces (int64 [pieces, 6]) in `blocks` blocks; with
        `carry`, a batch whose rows carry their state from the previous batch (lanes
        first_lane, first_lane + 1, ...)."""
        column = ops.COLUMN
        # A batch of empty blocks: one item gives the padding its shape and dtype.
        per_row = self._rows(table) or [self._checked(self.dataset[0], "dataset[0]")]
        shape = (table, blocks, self.t_max)
        return PackedBatch(
            data=_packed([item[0] for item in per_row], *shape, self.data_padding, self._buffers),
            target=_packed([item[1] for item in per_row], *shape, self.target_padding, self._buffers),
            reset=ops.reset_mask(*shape, carry),
            valid=ops.valid_mask(*shape),
            ends=ops.end_mask(*shape),
            carry=ops.carry_mask(*shape) if carry else torch.zeros(blocks, dtype=torch.bool),
            lanes=torch.arange(first_lane, first_lane + blocks),
            segment_ids=ops.segment_ids(*shape),
            position_ids=ops.position_ids(*shape),
            cu_seqlens=ops.cu_seqlens(table),
            indices=table[:, column["sequence"]].clone(),
            table=table,
        )


class _Buffers:
    """Packed tensors kept to be written again once their batch is gone, as the C++ dataset's
    PackBuffers: a loader then reuses its memory batch after batch rather than faulting in fresh
    pages (the C library gives large blocks back to the system when they are freed). A tensor is
    reused when nothing but this list refers to it or to its storage (no view of it lives).

    In a DataLoader worker the batch goes to the main process through shared memory; it is packed
    there directly, so sending it moves no byte (an ordinary tensor would be copied there)."""

    KEPT = 8  # two tensors of each batch in flight, with prefetching

    def __init__(self):
        self.kept = []

    def __getstate__(self):  # a copy (a worker's) starts with none
        return {"kept": []}

    def take(self, shape, dtype):
        shape = torch.Size(shape)
        if torch.utils.data.get_worker_info() is not None:
            storage = torch.UntypedStorage._new_shared(shape.numel() * dtype.itemsize)
            return torch.empty(0, dtype=dtype).set_(storage, 0, shape)
        for i in range(len(self.kept)):
            if self.kept[i].shape == shape and self.kept[i].dtype == dtype and self._free(i):
                return self.kept[i]
        if len(self.kept) == self.KEPT:
            self.kept.pop(0)  # the oldest: its holder keeps it
        self.kept.append(torch.empty(shape, dtype=dtype))
        return self.kept[-1]

    def _free(self, i):
        # Held by the list alone (getrefcount counts its argument too), and the storage by the
        # tensor alone (and the storage object asked).
        storage = self.kept[i].untyped_storage()
        return sys.getrefcount(self.kept[i]) == 2 and torch._C._storage_Use_Count(storage._cdata) == 2


def _packed(steps, table, blocks, t_max, padding, buffers):
    """`steps` packed: row i's whole sequence [T, ...] or its piece (or a dict of them) for each
    table row, or, for a table of no row, one item that gives the padding its shape and dtype."""
    first = steps[0]
    if isinstance(first, dict):
        return {key: _packed([item[key] for item in steps], table, blocks, t_max, padding, buffers) for key in first}
    out = buffers.take((blocks, t_max, *first.shape[1:]), first.dtype)
    if len(table) == 0:
        return out.fill_(padding)
    return ops.pack(steps, table, blocks, t_max, padding, out=out)
