"""BlockSampler's pickles and states, checked as data from outside: a pickle's parts (the
planner's lengths and options, the saved state) and a state's keys and ints, each refused with
an error naming the part and its value rather than failing where it breaks; and the planner made
again from a pickle's parts."""

import json
import numbers

import torch

from bload import mixture
from bload._arguments import shown, stored_cap

__all__ = [
    "check_pickled_attributes",
    "check_state_values",
    "damaged",
    "pickled_attributes",
    "pickled_planner",
    "stored_planner",
    "tensor_bytes",
]


def check_state_values(state):
    """Refuses a state's key or int that torch cannot hand to the core (which checks the rest),
    naming it, rather than letting torch's binding fail without a name."""
    for name, value in state.items():
        if not isinstance(name, str):
            raise TypeError(f"state key {name!r}: expected the string keys state_dict() saves")
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            if not -(2**63) <= value < 2**63:
                raise ValueError(
                    f"state[{name!r}] = {shown(value, str)}: expected an int from -2^63 to "
                    "2^63 - 1 (a 64-bit int, as state_dict() saves)"
                )


def damaged(name, value, expected):
    """The error of a pickled sampler whose `name` holds `value` instead of `expected`."""
    return (
        f"a pickled BlockSampler whose {name} = {value!r:.80}: expected {expected} (the pickle is "
        "damaged, edited, or not a BlockSampler's)"
    )


def stored_planner(stored):
    """(lengths, options, a mixture's sources JSON or "") of a pickle's _planner, checked."""
    dtypes = {"int32": torch.int32, "int64": torch.int64}
    expected = "(the lengths' dtype, int32 or int64, their bytes, the planner's options as JSON)"
    if not (
        isinstance(stored, tuple)
        and len(stored) == 3
        and stored[0] in dtypes
        and isinstance(stored[1], bytes)
        and isinstance(stored[2], str)
        and len(stored[1]) % dtypes[stored[0]].itemsize == 0
    ):
        raise ValueError(damaged("_planner", stored, expected))
    dtype, data, options = stored
    lengths = (
        torch.frombuffer(bytearray(data), dtype=dtypes[dtype])
        if data
        else torch.empty(0, dtype=torch.long)
    )
    options, _, sources = options.partition("\n")  # a mixture's sources follow the options
    try:
        options = json.loads(options)
    except ValueError:
        options = None
    if not isinstance(options, dict):
        raise ValueError(damaged("_planner", stored[2], "the planner's options as a JSON object"))
    return lengths, options, sources


def pickled_planner(lengths, options, sources, stored):
    """The planner of a pickle's _planner (`stored`), from what stored_planner read of it; an
    option missing or of the wrong type is refused, naming the pickle's part."""
    try:
        if sources:
            return mixture.stored_planner(lengths, sources, options)
        return torch.classes.bload.Planner(
            lengths,
            options["t_max"],
            blocks_per_batch=options["blocks_per_batch"],
            world_size=options["world_size"],
            seed=options["seed"],
            policy=options["policy"],
            split_oversized=options["oversize"] == "split",
            cost=options.get("cost", "steps"),  # pickles from before the option: by steps
            max_pieces=stored_cap(options),
        )
    except (KeyError, TypeError) as err:
        raise ValueError(
            damaged("_planner", stored[2], f"the planner's options (no {err})")
        ) from None


def tensor_bytes(tensor):
    """A CPU tensor's bytes, without NumPy (which bload does not require)."""
    tensor = tensor.contiguous()
    out = bytearray(tensor.numel() * tensor.element_size())
    if out:
        torch.frombuffer(out, dtype=tensor.dtype).copy_(tensor.view(-1))
    return bytes(out)


def pickled_attributes(sampler):
    """A BlockSampler's pickle: its attributes as plain values, the planner's lengths (their bytes)
    and options (the core's JSON), and the sampler's state (identity and checksum included).
    Never torch's ScriptObject: torch's unpickler trusts a ScriptObject's saved state, and a
    damaged pickle of one can crash the process, where a damaged plain value is refused by the
    planner's or the state's checks."""
    (lengths, options), _ = sampler.planner.__getstate__()
    skipped = ("planner", "plan")
    state = {name: value for name, value in sampler.__dict__.items() if name not in skipped}
    state["_planner"] = (str(lengths.dtype).removeprefix("torch."), tensor_bytes(lengths), options)
    state["_state"] = sampler.state_dict()
    return state


def check_pickled_attributes(attributes, options):
    """Refuses a pickle whose sampler attributes disagree with its planner's options: the sampler
    would serve another rank's batches, or blocks the plan does not have."""
    for name in ("t_max", "blocks_per_batch", "world_size", "seed"):
        value, expected = attributes.get(name), options.get(name)
        if value != expected or isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(
                damaged(name, value, f"{expected!r}, the planner's {name} it was pickled with")
            )
    rank, world_size = attributes.get("rank"), attributes["world_size"]
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(damaged("rank", rank, f"a rank from 0 to {world_size - 1}"))
