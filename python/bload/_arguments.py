"""The sampler's arguments checked once, as the core bounds them: ints with their bounds, the
policies' names, lengths in any form a user passes (a file, a tensor, a list or numpy array),
and the world size and rank, torch.distributed's where it is initialized."""

import collections.abc
import numbers
import os

import torch

from bload import _library

_library.load()

_INT64 = (-(2**63), 2**63 - 1)

#: The policies a plan can have, in the core's order.
POLICIES = tuple(torch.ops.bload.policy_names())

#: The values each int option may take, from the core's one list: name -> (lowest, highest).
BOUNDS = {name: (low, high) for name, low, high in zip(*torch.ops.bload.option_bounds())}


def integer(name, value, minimum=_INT64[0], maximum=_INT64[1]):
    """`value` as an int from `minimum` to `maximum`, or a TypeError/ValueError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} = {shown(value)}: expected an int")
    if not minimum <= value <= maximum:
        raise ValueError(
            f"{name} = {shown(value, str)}: expected an int from {minimum} to {maximum}"
        )
    return int(value)


# What the core's C++ options hold for no cap on a block's pieces (PlanOptions::max_pieces).
NO_CAP = -1


def piece_cap(max_pieces):
    """The max_pieces option as the planner takes it: NO_CAP for None, else an int of at least 1
    (its largest value the core checks, naming max_pieces)."""
    if max_pieces is None:
        return NO_CAP
    if isinstance(max_pieces, bool) or not isinstance(max_pieces, numbers.Integral):
        raise TypeError(f"max_pieces = {max_pieces!r}: expected None (no cap) or an int")
    if max_pieces < 1:
        raise ValueError(
            f"max_pieces = {max_pieces}: expected None (no cap) or at least 1 piece per block"
        )
    return int(max_pieces)


def stored_cap(options):
    """The max_pieces of the core's JSON of options (absent: no cap, as saved before it)."""
    return piece_cap(options.get("max_pieces"))


def shown(value, form=repr):
    """form(value), repr by default, but for an int too long for Python to print (past
    sys.get_int_max_str_digits()): its size instead."""
    try:
        return form(value)
    except ValueError:
        return f"an int of {value.bit_length()} bits"


def _not_an_int(value):
    """Why `value`, an element of a sequence of lengths, is not an int ("" when it is): a bool,
    a float, a tensor or array of either, anything else that is not an integer."""
    dtype = getattr(value, "dtype", None)
    if dtype is not None:  # a 0-d tensor or a NumPy scalar
        if isinstance(dtype, torch.dtype):
            integral = not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)
        else:
            integral = getattr(dtype, "kind", None) in ("i", "u")
        if not integral or getattr(value, "ndim", 0) != 0:
            return "expected an int"
        return ""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return "expected an int"
    if not _INT64[0] <= value <= _INT64[1]:
        return "expected an int that fits 64 bits (a sequence's length in steps)"
    return ""


def _first_bad_length(lengths, name, at=None):
    """The error naming the first element of the sequence `lengths` that is not an int, or None;
    only the elements at indices `at` (a list of ints, in order) where it is given."""
    if not isinstance(lengths, collections.abc.Sequence):
        return None
    if at is not None and set(map(type, map(lengths.__getitem__, at))) == {int}:
        return None  # ints torch read: of 64 bits (the common case, in no Python loop)
    for index in range(len(lengths)) if at is None else at:
        value = lengths[index]
        why = _not_an_int(value)
        if why:
            error = TypeError if why == "expected an int" else ValueError
            return error(f"{name}[{index}] = {shown(value)}: {why}")
    return None


def lengths_tensor(lengths, name="lengths"):
    """`lengths` (a lengths file's path, a tensor, a sequence of ints or a NumPy array) as a
    tensor, for the core to check; an element of a sequence that is not an int (a bool, a
    float) is refused naming it, `name[index] = value`."""
    if isinstance(lengths, (str, os.PathLike)):
        # Any lengths file: the core's formats, and Arrow or Parquet's only list column.
        from bload.lengths import read_lengths

        return read_lengths(lengths)
    if isinstance(lengths, torch.Tensor):
        return lengths
    expected = "expected a lengths file's path, a 1-d integer tensor or a sequence of ints"
    try:
        # A numpy array's memory as it is (int32 and int64 are read in place); an empty list
        # becomes int64 rather than float.
        tensor = torch.as_tensor(lengths)
    except (TypeError, ValueError, RuntimeError, OverflowError) as err:
        raise _first_bad_length(lengths, name) or TypeError(f"{name}: {expected} ({err})") from None
    if tensor.numel() == 0:
        return tensor.long()
    dtype = getattr(lengths, "dtype", None)
    if tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool:
        bad = _first_bad_length(lengths, name) if dtype is None else None
        if bad is not None:
            raise bad
        # Say what the caller passed, not the tensor it became.
        got = f"a {type(lengths).__name__} of {dtype}" if dtype is not None else ""
        raise TypeError(f"{name}: {expected}{', got ' + got if got else ''}")
    # torch reads a bool (or a bool tensor) among ints as 0 or 1: of a sequence, the elements
    # read as at most 1 are looked at, found by torch (not a Python pass over every element).
    if dtype is None and tensor.dim() == 1:
        at = torch.nonzero(tensor <= 1).view(-1)
        bad = _first_bad_length(lengths, name, at.tolist()) if at.numel() else None
        if bad is not None:
            raise bad
    return tensor


def distributed(world_size, rank):
    """world_size and rank, each torch.distributed's where it is initialized and not given."""
    initialized = torch.distributed.is_available() and torch.distributed.is_initialized()
    if world_size is None:
        world_size = torch.distributed.get_world_size() if initialized else 1
    world_size = integer("world_size", world_size, *BOUNDS["world_size"])
    if rank is None:
        rank = torch.distributed.get_rank() if initialized else 0
    return world_size, integer("rank", rank, 0, world_size - 1)
