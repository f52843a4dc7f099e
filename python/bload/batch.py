"""PackedBatch: one packed batch of one rank, made from the core's one declaration of the batch
(torch.ops.bload.batch_fields(), the Rust core's BatchField), as C++'s bload::PackedBatch and
bload::tch::PackedBatch are.

A batch holds what a loader reads and plans: `data`, `target` and the block `table` (and the
batch's shape, and for lanes whether its rows carry state and the lane of its first row). Every
other field (reset, valid, ends, carry, lanes, segment_ids, position_ids, cu_seqlens, indices,
state_in, state_out) is written from the table by one operator, torch.ops.bload.batch_tables,
the first time one of them is read, on the device the batch was moved to. So a batch crosses from a DataLoader worker as
three tensors, and a CUDA user moves the small table's results, not seven [blocks, t_max]
tensors made on the host.
"""

import torch

from bload import _library

_library.load()

__all__ = ["PackedBatch", "BATCH_FIELDS", "TABLE_FIELDS"]

Tensor = torch.Tensor

_names, _dtypes, _shapes, _from_table, _docs = torch.ops.bload.batch_fields()
#: The packed batch's fields in the core's order: name -> (dtype, shape rule, doc).
BATCH_FIELDS = {name: (dtype, shape, doc) for name, dtype, shape, doc in zip(_names, _dtypes, _shapes, _docs)}
#: The fields written from the table, in torch.ops.bload.batch_tables' order.
TABLE_FIELDS = tuple(name for name, made in zip(_names, _from_table) if made)
#: The fields a loader reads or plans.
_LOADED = tuple(name for name, made in zip(_names, _from_table) if not made)
if set(_LOADED) != {"data", "target", "table"}:
    raise ImportError(f"bload: the core declares the batch's loaded fields {_LOADED}: this package knows data, target and table")


def _map(value, function):
    if isinstance(value, dict):
        return {key: function(item) for key, item in value.items()}
    return function(value)


def _doc():
    lines = ["One packed batch of one rank; per-step tensors are [blocks, t_max, ...].", ""]
    for name, (dtype, shape, doc) in BATCH_FIELDS.items():
        kind = "the dataset's dtype" if dtype == "loaded" else dtype
        lines.append(f"{name}: {kind} {shape}, {doc}.")
    lines += [
        "",
        "data and target are dicts of such tensors where the dataset's items were. The table stays",
        "on the CPU. The other fields are made from it on first use, all at once, on the batch's",
        "device (see to()).",
    ]
    return "\n".join(lines)


class PackedBatch:
    __doc__ = _doc()
    __slots__ = ("data", "target", "table", "blocks", "t_max", "carries_state", "first_lane", "device", "_tables")

    def __init__(self, data, target, table, blocks, t_max, *, carries_state=False, first_lane=0, device=None):
        self.data, self.target, self.table = data, target, table
        self.blocks, self.t_max = blocks, t_max
        #: Whether each row carries its state from the previous batch (policy "lanes").
        self.carries_state, self.first_lane = carries_state, first_lane
        #: Where the fields made from the table go: None for the CPU.
        self.device = device
        self._tables = None

    def tables(self):
        """Every field written from the table, by name: made by one batch_tables call the first
        time (reading any of them calls this), then kept."""
        if self._tables is None:
            made = torch.ops.bload.batch_tables(self.table, self.blocks, self.t_max, self.carries_state, self.first_lane)
            if self.device is not None:
                made = [tensor.to(self.device, non_blocking=True) for tensor in made]
            self._tables = dict(zip(TABLE_FIELDS, made))
        return self._tables

    def to(self, device, non_blocking=False):
        """The batch with data and target on `device`, and the fields made from the table made
        there (moved, where they were made already). The table stays on the CPU, where the
        operators read it."""
        moved = PackedBatch(
            _map(self.data, lambda tensor: tensor.to(device, non_blocking=non_blocking)),
            _map(self.target, lambda tensor: tensor.to(device, non_blocking=non_blocking)),
            self.table, self.blocks, self.t_max, carries_state=self.carries_state, first_lane=self.first_lane,
            device=torch.device(device),
        )  # fmt: skip
        if self._tables is not None:
            moved._tables = {name: tensor.to(device, non_blocking=non_blocking) for name, tensor in self._tables.items()}
        return moved

    def pin_memory(self, device=None):
        """The batch in pinned memory: DataLoader(pin_memory=True) calls it."""
        del device  # pinned for the current accelerator, as torch.Tensor.pin_memory() does
        pinned = PackedBatch(
            _map(self.data, Tensor.pin_memory), _map(self.target, Tensor.pin_memory), self.table, self.blocks,
            self.t_max, carries_state=self.carries_state, first_lane=self.first_lane, device=self.device,
        )  # fmt: skip
        if self._tables is not None:
            pinned._tables = {name: tensor.pin_memory() for name, tensor in self._tables.items()}
        return pinned

    # Pickled (sent from a worker) as what a loader read and planned: the tables are made where
    # the batch is used.
    def __reduce__(self):
        options = {"carries_state": self.carries_state, "first_lane": self.first_lane, "device": self.device}
        return (_rebuild, (self.data, self.target, self.table, self.blocks, self.t_max, options))

    def __getitem__(self, key):
        raise TypeError(
            f"PackedBatch[{key!r}]: a bload batch is one packed batch, not a list of samples; it reached a "
            "collate function that indexes it: pass collate_fn=bload.collate to the DataLoader"
        )

    def __repr__(self):
        shape = _map(self.data, lambda tensor: list(tensor.shape))
        return f"PackedBatch(data={shape}, pieces={len(self.table)}, blocks={self.blocks}, t_max={self.t_max})"


def _rebuild(data, target, table, blocks, t_max, options):
    return PackedBatch(data, target, table, blocks, t_max, **options)


def _table_field(name):
    dtype, shape, doc = BATCH_FIELDS[name]
    return property(lambda batch: batch.tables()[name], doc=f"{dtype} {shape}: {doc} (made from the table on first use)")


for _name in TABLE_FIELDS:
    setattr(PackedBatch, _name, _table_field(_name))
del _name
