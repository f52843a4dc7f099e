"""LaneState: every lane's recurrent state for the lanes policy, kept, handed to the model, and
checkpointed by the library instead of by each training loop.

With policy="lanes", row j of every batch of rank r is lane r * blocks_per_batch + j for the
whole epoch, and a batch's `carry` [blocks] says which rows go on from the state their lane had
at the end of the previous batch. LaneState holds this rank's lanes' states, one tensor
[blocks_per_batch, *shape] (lanes first; a GRU's [layers, batch, hidden] state is kept as
state.transpose(0, 1)):

    lanes = bload.LaneState(sampler, shape=(hidden,))
    for batch in loader:
        outputs, final = model(batch.data, batch.table, lanes.initial(batch))
        lanes.update(batch, final)            # detached: truncated back-propagation
    checkpoint = {"sampler": sampler.state_dict(), "lanes": lanes.state_dict()}  # every rank calls it

A kernel that runs over cu_seqlens with one state per piece (docs/state_kernels.md) takes
lanes.initial_pieces(batch) [pieces, *shape] and hands its final states back with
lanes.update_pieces(batch, final_states), by the batch's state_in and state_out.

state_dict() gathers every rank's lanes (a collective under torch.distributed), so a checkpoint
holds all [lanes, *shape] of them; load_state_dict() takes this rank's rows back, on a run of the
same lane count in any factors (2 ranks x 2 rows saved, 1 x 4 loaded), as the sampler resumes.
"""

import collections.abc
import math
import numbers

import torch

from bload._arguments import shown

__all__ = ["LaneState"]

_INT64_MAX = 2**63 - 1


def _lane_shape(shape):
    """`shape`, one lane's state's (a tuple or list of sizes, or one size), as a tuple of ints
    from 0 up; anything else (a string, a float, a bool, a negative size) named."""
    expected = "expected a lane state's shape: a tuple or list of ints, each at least 0, or one int"
    sizes = (shape,) if isinstance(shape, numbers.Integral) else shape
    if isinstance(shape, bool) or not isinstance(sizes, (tuple, list)):  # torch.Size: a tuple
        raise TypeError(f"shape = {shown(shape)}: {expected}")
    for index, size in enumerate(sizes):
        if isinstance(size, bool) or not isinstance(size, numbers.Integral):
            raise TypeError(f"shape = {shown(shape)}: shape[{index}] = {shown(size)}: {expected}")
        if not 0 <= size <= _INT64_MAX:
            where = f"shape = {shown(shape)}: shape[{index}]" if sizes is shape else "shape"
            raise ValueError(
                f"{where} = {shown(size, str)}: expected a size from 0 to 2^63 - 1, one of "
                "a lane state's dimensions"
            )
    return tuple(int(size) for size in sizes)


def _tensor(name, value):
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} = a {type(value).__name__}: expected a tensor")
    return value


class LaneState:
    """This rank's lanes' recurrent states, `shape` each (a tuple or list of sizes, each an int
    of at least 0, or one int for (int,)), zero at first.

    sampler: the BlockSampler (policy "lanes") whose batches the state follows; its world_size,
    rank and blocks_per_batch say which lanes are this rank's.
    """

    def __init__(self, sampler, shape, *, dtype=torch.float32, device=None):
        plan = getattr(sampler, "plan", None)
        if plan is not None and not plan.carries_state():
            # Its batches carry no state: every initial() and update() would be refused later.
            raise ValueError(
                f"sampler = a BlockSampler of policy {sampler.state_dict()['policy']!r}: expected "
                'one of policy "lanes", whose rows carry their lanes\' state from batch to batch'
            )
        self.lanes = sampler.world_size * sampler.blocks_per_batch
        self.rows, self.rank = sampler.blocks_per_batch, sampler.rank
        self.shape = _lane_shape(shape)
        elements = self.rows * math.prod(self.shape)
        if elements > _INT64_MAX:  # torch's own error would name neither shape nor the rows
            raise ValueError(
                f"shape = {shown(shape)}: expected a lane state's shape whose {self.rows} rows "
                f"(blocks_per_batch) hold at most 2^63 - 1 elements, not {elements}"
            )
        #: [rows, *shape]: row j is lane rank * rows + j.
        self.state = torch.zeros(self.rows, *self.shape, dtype=dtype, device=device)

    def initial(self, batch):
        """[blocks, *shape]: each row's lane state where `batch` carries it, zero elsewhere (on
        the state's device), the state a model starts the batch from."""
        self._check(batch)
        carry = batch.carry.to(self.state.device).view(-1, *([1] * len(self.shape)))
        return torch.where(
            carry, self.state, torch.zeros((), dtype=self.state.dtype, device=self.state.device)
        )

    def update(self, batch, final_state, detach=True):
        """Keeps `final_state` [blocks, *shape], the rows' states at the end of `batch`, as their
        lanes' (detached unless `detach` is False: gradients stop at batch boundaries)."""
        self._check(batch)
        _tensor("final_state", final_state)
        expected = (self.rows, *self.shape)
        if tuple(final_state.shape) != expected:
            raise ValueError(
                f"final_state has shape {list(final_state.shape)}: expected {list(expected)}, a state per row"
            )
        self.state = final_state.detach() if detach else final_state

    def initial_pieces(self, batch):
        """[pieces, *shape]: each piece's initial state, in cu_seqlens order, for a kernel that
        runs over cu_seqlens with a state per piece: its row's lane state where `batch.state_in`
        names the row (the piece goes on from the previous batch), zero elsewhere."""
        self._check(batch)
        state_in = batch.state_in.to(self.state.device)
        seeded = (state_in >= 0).view(-1, *([1] * len(self.shape)))
        zero = torch.zeros((), dtype=self.state.dtype, device=self.state.device)
        return torch.where(seeded, self.state[state_in.clamp(min=0)], zero)

    def update_pieces(self, batch, final_states, detach=True):
        """Keeps the final state of the piece `batch.state_out` names for each row as its lane's,
        from `final_states` [pieces, *shape] (cu_seqlens order); the other rows' lanes keep
        theirs, which nothing reads again. Detached unless `detach` is False."""
        self._check(batch)
        _tensor("final_states", final_states)
        pieces = len(batch.table)
        expected = (pieces, *self.shape)
        if tuple(final_states.shape) != expected:
            raise ValueError(
                f"final_states has shape {list(final_states.shape)}: expected {list(expected)}, a state per piece"
            )
        if pieces == 0:  # a batch of padding only: no lane changes
            return
        state_out = batch.state_out.to(final_states.device)
        kept = (state_out >= 0).view(-1, *([1] * len(self.shape)))
        state = torch.where(
            kept, final_states[state_out.clamp(min=0)], self.state.to(final_states.device)
        )
        self.state = state.detach() if detach else state

    def state_dict(self):
        """{"lanes": count, "state": every lane's state [lanes, *shape] on the CPU}. Under
        torch.distributed it gathers every rank's rows: every rank must call it."""
        state = self.state.detach()
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        if distributed and torch.distributed.get_world_size() > 1:
            gathered = [torch.empty_like(state) for _ in range(torch.distributed.get_world_size())]
            torch.distributed.all_gather(gathered, state.contiguous())
            state = torch.cat(gathered)
        return {"lanes": self.lanes, "state": state.cpu()}

    def load_state_dict(self, state):
        """Takes this rank's rows of a state_dict() saved with the same lane count (in any
        factors) and lane shape; another is a ValueError naming both."""
        if not isinstance(state, collections.abc.Mapping):
            raise TypeError(
                f"state = a {type(state).__name__}: expected the dict LaneState.state_dict() "
                "returns"
            )
        missing = [name for name in ("lanes", "state") if name not in state]
        if missing:
            raise ValueError(
                f"state[{missing[0]!r}] = missing: expected the dict LaneState.state_dict() "
                "returns, with lanes and state"
            )
        lanes, saved = state["lanes"], state["state"]
        if isinstance(lanes, bool) or not isinstance(lanes, numbers.Integral):
            raise TypeError(
                f"state['lanes'] = {shown(lanes)}: expected an int, the lane count state_dict() "
                "saves"
            )
        if lanes != self.lanes:
            raise ValueError(
                f"state['lanes'] = {shown(lanes)}: expected {self.lanes} (world_size * blocks_per_batch), the "
                "lane count this run has; lanes resume with the lane count they were saved with"
            )
        expected = (self.lanes, *self.shape)
        if not isinstance(saved, torch.Tensor):
            raise TypeError(
                f"state['state'] = a {type(saved).__name__}: expected a tensor {list(expected)}, "
                "every lane's state"
            )
        if tuple(saved.shape) != expected:
            got = list(saved.shape)
            raise ValueError(
                f"state['state'] is {got}: expected a tensor {list(expected)}, every lane's state"
            )
        rows = saved[self.rank * self.rows : (self.rank + 1) * self.rows]
        self.state = rows.to(device=self.state.device, dtype=self.state.dtype)

    def _check(self, batch):
        first = self.rank * self.rows
        if not batch.carries_state or batch.first_lane != first or batch.blocks != self.rows:
            raise ValueError(
                f"a batch of lanes {batch.first_lane} to {batch.first_lane + batch.blocks - 1}"
                f"{'' if batch.carries_state else ' that carries no state'}: expected a lanes batch of "
                f"this rank's lanes {first} to {first + self.rows - 1} (from the sampler this LaneState was made with)"
            )
