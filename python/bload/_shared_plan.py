"""Plans shared on a node (docs/shared_plans.md): BlockSampler's options for them, checked."""

import numbers
import os

import torch


def integer_at_least_0(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"{name} = {value!r}: expected an int of at least 0")
    return int(value)


# The longest wait a shared plan's reader takes: a year, far beyond any plan's writing. The core's
# MAX_SHARED_PLAN_TIMEOUT_S, past which its operators refuse too (test_shared_plans.py holds the
# two together).
_MAX_TIMEOUT = 365 * 24 * 3600.0


def _environment_local_rank():
    """torchrun's LOCAL_RANK, or 0 where it is not set."""
    value = os.environ.get("LOCAL_RANK", "0")
    try:
        local_rank = int(value)
    except ValueError:
        local_rank = -1
    if local_rank < 0:  # -2 was named as local_rank = -2, an argument the caller never gave
        raise ValueError(
            f"LOCAL_RANK = {value!r} (the environment's, read as local_rank): expected an int "
            "of at least 0, or local_rank= given"
        )
    return local_rank


def shared_plan(directory, local_rank, timeout):
    """(directory, local rank, timeout) of a shared plan, checked; None without a directory."""
    if directory is None:
        return None
    if not isinstance(directory, (str, os.PathLike)):
        raise TypeError(f"shared_plan_dir = {directory!r}: expected a directory's path")
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise ValueError(f"shared_plan_dir = {directory!r}: expected an existing directory")
    if local_rank is None:
        local_rank = _environment_local_rank()
    local_rank = integer_at_least_0("local_rank", local_rank)
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise ValueError(
            f"shared_plan_timeout = {timeout!r}: expected a finite number of seconds, at least 0"
        )
    # inf or 1e300 seconds would wait forever (or overflow the core's clock): refused.
    if not (0 <= timeout <= _MAX_TIMEOUT):
        raise ValueError(
            f"shared_plan_timeout = {timeout!r}: expected a finite number of seconds, from 0 to "
            f"{_MAX_TIMEOUT:.0f}"
        )
    return directory, local_rank, float(timeout)


def plan_of(planner, shared, epoch):
    """The plan of `epoch`: the rank's own without `shared`, else the node's (written first by
    the rank of local rank 0), whose mapped lengths the planner keeps in place of its own."""
    if shared is None:
        return planner.plan(epoch)
    directory, local_rank, timeout = shared
    if local_rank == 0:
        planner.write_shared_plan(epoch, directory)
    return planner.map_shared_plan(epoch, directory, timeout)


def resume_of(planner, shared, state):
    """A saved state checked and its epoch resumed: (plan or None, batches served, next epoch);
    with `shared`, the rest of the epoch is the node's plan like any epoch (written first by the
    rank of local rank 0; the planner keeps the file's lengths, not its own)."""
    if shared is None:
        return planner.resume_state(state)
    directory, local_rank, timeout = shared
    return planner.resume_shared_state(state, directory, local_rank, timeout)


def reader_planner(
    shared, t_max, blocks_per_batch, world_size, seed, policy, split, cost, max_pieces
):
    """The planner of a rank of local rank above 0: it holds no lengths, its planner's are the
    node's plan file's (epoch 0's), compared with every rank's by the agreement check."""
    directory, _, timeout = shared
    options = (t_max, blocks_per_batch, world_size, seed, policy, split, cost, max_pieces)
    return torch.ops.bload.shared_planner(directory, 0, timeout, *options)
