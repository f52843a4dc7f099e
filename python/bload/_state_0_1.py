"""A sampler state of bload 0.1 (no version: the position alone), made the current format's
state of a sampler at that position, which the core then checks against the plan as any state.
Each of its fields is named by the key the state has."""

from bload._arguments import BOUNDS, integer

# Its fields, each an int within these bounds (the core checks them against the plan). Its
# epoch's next must be an int64 too, as set_epoch's.
_INT64_MAX = 2**63 - 1
_BOUNDS_0_1 = {
    "epoch": BOUNDS["epoch"],
    "position": (0, _INT64_MAX),
    "world_size": BOUNDS["world_size"],
    "blocks_per_batch": BOUNDS["blocks_per_batch"],
    "planned_world_size": BOUNDS["world_size"],
    "first_block": (0, _INT64_MAX),
}
_STATE_0_1 = tuple(_BOUNDS_0_1)


def current_state_of(state, planner, blocks_per_batch):
    """`state` of bload 0.1 as the current format's state of a sampler of `planner` (with
    `blocks_per_batch` where the state predates it), or an error naming its key."""
    others = [name for name in state if name not in _STATE_0_1]
    if others:  # this format's state with its version lost, or another dict
        raise ValueError(
            f"state['version'] = missing: expected the version state_dict() saves; a state "
            f"without one is bload 0.1's, which holds only {', '.join(_STATE_0_1)}, not "
            f"{', '.join(map(repr, others))}"
        )
    missing = [name for name in ("epoch", "position", "world_size") if name not in state]
    if missing:
        raise ValueError(f"state: no {', '.join(missing)}: expected the dict state_dict() returns")
    value = {name: integer(f"state[{name!r}]", state[name], *_BOUNDS_0_1[name]) for name in state}
    world_size = value["world_size"]
    position = {
        "epoch": value["epoch"],
        "batches": value["position"],
        "world_size": world_size,
        # A state saved before blocks_per_batch was part of it is taken to have this one.
        "blocks_per_batch": value.get("blocks_per_batch", blocks_per_batch),
        "planned_world_size": value.get("planned_world_size", world_size),
        "first_block": value.get("first_block", 0),
    }
    # The epoch after it is the state's next_epoch: the last epoch, 2^63 - 2, has one.
    return dict(planner.sampler_state(position, value["epoch"] + 1))
