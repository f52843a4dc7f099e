"""How BlockDataset packs a batch's items, and names an item unlike the others: the padding
options as the packers take them, every item's data (and target) a tensor or a dict of the same
keys as the first item's, and the packing kernel's refusals retold with the items' names."""

import numbers
import re

import torch
from torch import Tensor

from bload import ops


def padding_option(option, value):
    """A padding option as the packers take it (a torch Scalar), or a TypeError/ValueError naming
    it: an int within int64, a float, or a complex for complex data. Whether the packed dtype
    holds it is the kernel's check, batch by batch. A bool is refused: True would pad with 1, a
    real class id or token, where the caller meant a flag."""
    if isinstance(value, bool) or not isinstance(value, numbers.Complex):
        raise TypeError(
            f"{option} = {value!r:.60}: expected a number (an int or a float; 0 or 1 for bool "
            f"data), got {'a bool' if isinstance(value, bool) else type(value).__name__}"
        )
    if isinstance(value, numbers.Integral):
        low, high = -(2**63), 2**63 - 1
        if not low <= value <= high:
            raise ValueError(
                f"{option} = {value}: expected an int from {low} to {high} (int64's range) or a "
                "float"
            )
        return int(value)
    return float(value) if isinstance(value, numbers.Real) else complex(value)


def _described(steps):
    if isinstance(steps, dict):
        return f"a dict of keys {sorted(steps, key=repr)}"
    return "a tensor" if isinstance(steps, Tensor) else f"a {type(steps).__name__}"


def _unlike(steps, row, field, where):
    """The error (to raise) for row `row`'s `field` (data or target, or a key of them), whose structure
    (a tensor, or a dict of which keys) is not row 0's, the batch's first item's."""
    first, item = steps[0], steps[row]
    expected = (
        f"expected every item's {field} to be a tensor [T, ...], or every one a dict with the same "
        "keys"
    )
    if isinstance(first, dict) and isinstance(item, dict):
        lacks = [
            f"{name} lacks {sorted(keys, key=repr)}"
            for name, keys in (
                (where(row), first.keys() - item.keys()),
                (where(0), item.keys() - first.keys()),
            )
            if keys
        ]
        return ValueError(
            f"{where(row)} {field} has keys {sorted(item, key=repr)}, where the batch's first "
            f"item, {where(0)}, has {sorted(first, key=repr)} ({'; '.join(lacks)}): {expected}"
        )
    return TypeError(
        f"{where(row)} {field} is {_described(item)}, where the batch's first item, "
        f"{where(0)}, has {_described(first)}: {expected}"
    )


def packed(steps, table, blocks, t_max, padding, option, buffers, field, where):
    """`steps` packed: row i's whole sequence [T, ...] or its piece (or a dict of them) for each
    table row, or, for a table of no row, one item that gives the padding its shape and dtype.
    `option` names the padding in errors, `field` what steps are (data or target, or a key of
    them) and `where(row)` row's item."""
    first = steps[0]
    if isinstance(first, dict):
        # Every item's keys, each a tensor (checked as read): a key the first item lacks would
        # be dropped, one it has and another lacks would fail with a bare KeyError.
        keys = first.keys()
        for row, item in enumerate(steps):
            if not isinstance(item, dict) or item.keys() != keys:
                raise _unlike(steps, row, field, where)
        return {
            key: packed(
                [item[key] for item in steps],
                table,
                blocks,
                t_max,
                padding,
                option,
                buffers,
                f"{field}[{key!r}]",
                where,
            )
            for key in first
        }
    # In a worker, the batch goes to the main process through shared memory: packed there
    # directly, sending it moves no byte (an ordinary tensor would be copied there).
    shared = torch.utils.data.get_worker_info() is not None
    out = buffers.take([blocks, t_max, *first.shape[1:]], first.dtype, shared)
    # A table of no row packs no sequence: the kernel takes the padding's dtype from out, and
    # checks the padding against it as for any batch.
    sequences = steps if len(table) else []
    try:
        return ops.pack(sequences, table, blocks, t_max, padding, out=out)
    except RuntimeError as error:
        # A dict among the tensors (a tensor first): the operator's cast of the list fails. Not
        # looked for before, so that packing tensors checks nothing more per item.
        for row, item in enumerate(sequences):
            if not isinstance(item, Tensor):
                raise _unlike(steps, row, field, where) from None
        # The kernel's checks name its arguments, which the dataset's user never set: name
        # their option (the padding) or their items (sequences[i] is row i's) instead.
        message = str(error).split("\n")[0]
        if message.startswith("padding_value = "):
            raise ValueError(option + message.removeprefix("padding_value")) from None
        unlike = _UNLIKE.match(message)
        if unlike is None:
            raise
        row, kind, rest = unlike.groups()
        rest = rest.replace(
            "like sequences[0]", f"like {where(0)} {field} (the batch's first item)"
        )
        error_type = TypeError if kind == "dtype" else ValueError
        raise error_type(f"{where(int(row))} {field}: expected {kind} {rest}") from None


# The kernel's refusal of a sequence unlike the first: another shape after the steps, dtype or
# device (cpp/src/ops/checks.cpp).
_UNLIKE = re.compile(r"sequences\[(\d+)\]: expected (shape|dtype|device) (.*)$")
