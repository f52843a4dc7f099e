"""BlockDataset: an ordinary map-style dataset of variable-length sequences, served as the
packed batches (bload.PackedBatch) of the blocks BlockSampler plans.

The packing is the core's (bload.ops.pack), as in C++'s bload::BlockDataset. It runs where the
dataset is read: in the DataLoader's workers when there are any. A worker packs the data and
targets into shared memory and sends them with the table; the batch's other fields are made from
the table where the batch is used (see bload.PackedBatch).
"""

from typing import Dict, Union

import torch

from bload import _library, ops
from bload._arguments import BOUNDS, integer
from bload._packing import packed, padding_option
from bload.batch import PackedBatch
from bload.block_batch import BlockBatch
from bload.item_pool import ItemPool
from bload.read_ahead import ReadAhead
from bload.sequence_store import SequenceStore

_library.load()

__all__ = ["BlockDataset", "PackedBatch", "collate"]

Tensor = torch.Tensor
Steps = Union[Tensor, Dict[str, Tensor]]  # a sequence's data or target: [T, ...], or a dict of them


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
    batch. A dataset that defines `prefetch(index, offset, length)` has it called for the pieces
    of the sampler's next read_ahead batches before they are read, to start fetching them
    (docs/read_ahead.md). With `item_pool=bload.ItemPool(workers)`, the items of the batch and
    of those next read_ahead batches are read by the pool's threads (or processes), in plan
    order, ahead of their batches, and each batch packed in the pool's packer thread once its
    items are read; the batches are the same (docs/read_ahead.md, "Slow items").

        loader = DataLoader(BlockDataset(dataset, t_max), batch_sampler=sampler,
                            collate_fn=bload.collate, num_workers=2, pin_memory=True)
    """

    def __init__(
        self,
        dataset,
        t_max,
        *,
        data_padding=0.0,
        target_padding=-100,
        positions="sequence",
        item_pool=None,
    ):
        self.dataset = dataset
        if item_pool is not None and not isinstance(item_pool, ItemPool):
            raise TypeError(
                f"item_pool = {item_pool!r:.60}: expected None or a bload.ItemPool, e.g. "
                "item_pool=bload.ItemPool(8) (8 threads)"
            )
        # Reads the items of the batches ahead in its workers, in plan order (docs/read_ahead.md).
        self.item_pool = item_pool
        self._reads_ranges = callable(getattr(dataset, "get_range", None))
        # bload's store hands out copies, the caller's own; the packing only copies the steps
        # into its batch, so it reads views of the mapping instead (one copy, not two).
        self._store_views = isinstance(dataset, SequenceStore)
        self._read_ahead = ReadAhead(dataset)
        # Packed tensors reused once their batch is gone: the C++ dataset's cache, whose rule
        # (nothing else holds the tensor or a view of it) is decided where the counts are.
        self._buffers = torch.classes.bload.PackBuffers()
        self.t_max = integer("t_max", t_max, *BOUNDS["t_max"])
        # Checked against the packed dtype by the kernel, batch by batch (naming the option).
        self.data_padding = padding_option("data_padding", data_padding)
        self.target_padding = padding_option("target_padding", target_padding)
        # What position_ids count from: "sequence" or "piece" (a loader option, as C++'s
        # Options::positions: the plan is the same either way).
        if positions not in ("sequence", "piece"):
            raise ValueError(f'positions = {positions!r}: expected "sequence" or "piece"')
        self.positions = positions

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
        if batch.sequences and len(self.dataset) != batch.sequences:
            raise ValueError(
                f"dataset has {len(self.dataset)} sequences: expected {batch.sequences}, the lengths "
                "the sampler plans with"
            )
        self._read_ahead.start(batch)
        pool = getattr(self, "item_pool", None)  # pickles from before the option have none
        if pool is None:
            return self.pack(
                batch.table,
                batch.blocks,
                carry=batch.carry,
                first_lane=batch.first_lane,
                global_batch=batch.global_batch,
            )
        # Packed ahead in the pool's packer thread; a wrong item ends the epoch there, with
        # no worker left running.
        data, target, max_seqlen = pool.batch(
            batch, self._reads, self._read, self._pack_steps, self.dataset
        )
        return self._batch(
            data,
            target,
            batch.table,
            batch.blocks,
            max_seqlen,
            batch.carry,
            batch.first_lane,
            batch.global_batch,
        )

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
            for key, tensor in steps.items() if isinstance(steps, dict) else [(None, steps)]:
                place = f"{where} {name}" + (f"[{key!r}]" if key is not None else "")
                if not isinstance(tensor, Tensor) or tensor.dim() == 0:
                    raise TypeError(f"{place}: expected a tensor [T, ...], got {tensor!r:.60}")
                if length is not None and tensor.size(0) != length:
                    raise ValueError(
                        f"{place} has {tensor.size(0)} steps: expected {length}, {meaning}"
                    )
        return item

    def _reads(self, table):
        """The item reads of a table, in the order _rows makes them (for the item pool): each
        (arguments of _read, the piece as (sequence, offset, length), what names the read in
        errors). Where the dataset reads ranges (get_range), one a row, the piece's steps alone;
        else one a sequence, read whole once per batch."""
        column = ops.COLUMN
        pieces = (
            (row[column["sequence"]], row[column["offset"]], row[column["length"]])
            if self._reads_ranges
            else (row[column["sequence"]], 0, row[column["sequence_length"]])
            for row in table.tolist()
        )
        if self._reads_ranges:
            return [
                (piece, piece, "dataset.get_range({}, {}, {})".format(*piece)) for piece in pieces
            ]
        reads = {}
        for piece in pieces:
            if piece[0] not in reads:
                reads[piece[0]] = ((piece[0],), piece, f"dataset[{piece[0]}]")
        return list(reads.values())

    def _read(self, sequence, *piece):
        """Sequence `sequence` whole, or steps [offset, offset + length) of it (piece)."""
        if not piece:
            return self.dataset[sequence]
        if getattr(self, "_store_views", False):
            return self.dataset._views(sequence, *piece)
        return self.dataset.get_range(sequence, *piece)

    def _rows(self, table, values=None):
        """One item per table row: the piece's steps alone where the dataset reads ranges
        (get_range), else its sequence's whole item, read once per batch; `values`: the values
        of the table's reads (_reads), read ahead by the item pool, instead of reading here."""
        column = ops.COLUMN
        rows = table.tolist()
        given = None if values is None else iter(values)
        if self._reads_ranges:
            pieces = [
                (row[column["sequence"]], row[column["offset"]], row[column["length"]])
                for row in rows
            ]
            if given is not None:
                read = lambda *piece: next(given)  # noqa: E731 -- in the reads' order
            elif getattr(self, "_store_views", False):
                if len(self.dataset.fields) == 2:
                    # The store's own views, (data, target) of each piece's steps as the store
                    # made them: nothing to check a piece, and the files checked once a batch.
                    return self.dataset._range_views(pieces)
                read = self.dataset._views
            else:
                read = self.dataset.get_range
            return [
                self._checked(
                    read(sequence, offset, length),
                    f"dataset.get_range({sequence}, {offset}, {length})",
                    length,
                    "the length of the range asked for",
                )
                for sequence, offset, length in pieces
            ]
        items = {}
        for row in rows:
            sequence = row[column["sequence"]]
            if sequence not in items:
                items[sequence] = self._checked(
                    self.dataset[sequence] if given is None else next(given),
                    f"dataset[{sequence}]",
                    row[column["sequence_length"]],
                    "the sequence's length in the lengths the sampler plans with",
                )
        return [items[row[column["sequence"]]] for row in rows]

    def pack(self, table, blocks, *, carry=False, first_lane=0, global_batch=None):
        """The PackedBatch of a block table's pieces (int64 [pieces, 6]) in `blocks` blocks; with
        `carry`, a batch whose rows carry their state from the previous batch (lanes
        first_lane, first_lane + 1, ...); `global_batch` as BlockBatch has it."""
        data, target, _ = self._pack_steps(table, blocks, None, max_seqlen=False)
        return self._batch(data, target, table, blocks, None, carry, first_lane, global_batch)

    def _pack_steps(self, table, blocks, values, *, max_seqlen=True):
        """(data, target, the longest piece's steps) packed for a table; `values`: the values
        of the table's reads (_reads), read ahead by the item pool, instead of reading here.
        Where the pool has it made, in its packer thread, as ahead of the loop as it can."""
        # A batch of empty blocks: one item gives the padding its shape and dtype.
        per_row = self._rows(table, values) or [self._checked(self.dataset[0], "dataset[0]")]
        shape = (table, blocks, self.t_max)
        where = self._where(table)  # names a row's item, on errors only
        data = packed(
            [item[0] for item in per_row],
            *shape,
            self.data_padding,
            "data_padding",
            self._buffers,
            "data",
            where,
        )
        target = packed(
            [item[1] for item in per_row],
            *shape,
            self.target_padding,
            "target_padding",
            self._buffers,
            "target",
            where,
        )
        longest = torch.ops.bload.max_seqlen(table, blocks, self.t_max) if max_seqlen else None
        return data, target, longest

    def _where(self, table):
        """What names table row i's item in errors, as _rows names it: the get_range call of its
        piece where the dataset reads ranges, else its sequence's item. Called on errors only."""

        def where(row):
            sequence, offset, length = (
                table[row, ops.COLUMN[name]].item() for name in ("sequence", "offset", "length")
            )
            if self._reads_ranges:
                return f"dataset.get_range({sequence}, {offset}, {length})"
            return f"dataset[{sequence}]"

        return where

    def _batch(self, data, target, table, blocks, max_seqlen, carry, first_lane, global_batch):
        return PackedBatch(
            data,
            target,
            table,
            blocks,
            self.t_max,
            carries_state=carry,
            first_lane=first_lane,
            positions=self.positions,
            max_seqlen=max_seqlen,
            global_batch=global_batch,
        )
