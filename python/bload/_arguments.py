"""The sampler's arguments checked once, as the core bounds them: ints with their bounds, the
policies' names, lengths in any form a user passes (a file, a tensor, a list or numpy array),
and the world size and rank, torch.distributed's where it is initialized."""

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
        raise TypeError(f"{name} = {value!r}: expected an int")
    if not minimum <= value <= maximum:
        raise ValueError(f"{name} = {value}: expected an int from {minimum} to {maximum}")
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


def lengths_tensor(lengths):
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
        raise TypeError(f"lengths: {expected} ({err})") from None
    if tensor.numel() == 0:
        return tensor.long()
    if tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool:
        # Say what the caller passed, not the tensor it became.
        dtype = getattr(lengths, "dtype", None)
        got = (
            f"a {type(lengths).__name__} of {dtype}"
            if dtype is not None
            else (f"a {type(lengths).__name__} of {type(next(iter(lengths))).__name__}s")
        )
        raise TypeError(f"lengths: {expected}, got {got}")
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
