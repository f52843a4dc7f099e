"""The packed batch's fields as the core declares them (torch.ops.bload.batch_fields(), the Rust
core's BatchField), read once: bload.PackedBatch is made from them and bload.ops.batch_tables names
its outputs by them. A module of its own so that both import it and neither imports the other."""

import torch

from bload import _library

_library.load()

__all__ = ["BATCH_FIELDS", "TABLE_FIELDS", "HOST_INTS", "LOADED"]

_names, _dtypes, _shapes, _from_table, _docs = torch.ops.bload.batch_fields()
#: The packed batch's fields in the core's order: name -> (dtype, shape rule, doc).
BATCH_FIELDS = {
    name: (dtype, shape, doc) for name, dtype, shape, doc in zip(_names, _dtypes, _shapes, _docs)
}
#: The fields written from the table, in torch.ops.bload.batch_tables' order.
TABLE_FIELDS = tuple(name for name, made in zip(_names, _from_table) if made)
#: The batch's host integers (shape "int"): computed from the table when the batch is made.
HOST_INTS = tuple(name for name, shape in zip(_names, _shapes) if shape == "int")
if HOST_INTS != ("max_seqlen",):
    raise ImportError(
        f"bload: the core declares the batch's host integers {HOST_INTS}: this package knows max_seqlen"
    )
#: The fields a loader reads or plans.
LOADED = tuple(
    name for name, made in zip(_names, _from_table) if not made and name not in HOST_INTS
)
if set(LOADED) != {"data", "target", "table"}:
    raise ImportError(
        f"bload: the core declares the batch's loaded fields {LOADED}: this package knows data, target and table"
    )
