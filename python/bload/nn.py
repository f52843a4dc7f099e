"""Models for packed blocks, written once for eager PyTorch and TorchScript.

`PackedGRU` is a GRU cell stepped over each packed block whose state is zeroed wherever the block
table starts a piece (`torch.ops.bload.reset_mask`), so no state leaks from one sequence into the
next one packed behind it, and a linear head on every step. `forward_lanes` runs a batch of the
lanes policy, going on from each row's carried state. C++'s `bload::nn::PackedGRU`
(`<bload/nn/packed_gru.h>`) is the same module with the same parameter names, so weights move
between the two; tests/python/test_nn.py checks that both compute the same outputs.

    model = torch.jit.script(bload.nn.PackedGRU(features=16, hidden=64, outputs=1))
    outputs = model(batch.data, batch.table)                       # [blocks, t_max, outputs]
    outputs, final = model.forward_lanes(batch.data, batch.table, batch.carry, state)
"""

from typing import Tuple

import torch

from bload import _library

_library.load()  # torch.ops.bload, which the model calls (scripted or not)

__all__ = ["PackedGRU"]


class PackedGRU(torch.nn.Module):
    """GRUCell(features, hidden) then Linear(hidden, outputs) on every step of packed blocks
    [blocks, t_max, features]; submodules `cell` and `head`, the int attribute `hidden` (the
    state's width, which a trainer reads from a scripted model to allocate lane states)."""

    def __init__(self, features: int, hidden: int, outputs: int):
        super().__init__()
        self.cell = torch.nn.GRUCell(features, hidden)
        self.head = torch.nn.Linear(hidden, outputs)
        self.hidden = hidden

    def forward(self, data: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        """data [blocks, t_max, features] and the batch's block table -> [blocks, t_max, outputs].
        Every piece starts from a zero state."""
        blocks = data.size(0)
        state = torch.zeros(blocks, self.hidden, dtype=data.dtype, device=data.device)
        keep = torch.ops.bload.reset_mask(table, blocks, data.size(1)).logical_not()
        return self._run(data, keep, state)[0]

    @torch.jit.export
    def forward_lanes(
        self, data: torch.Tensor, table: torch.Tensor, carry: torch.Tensor, state: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """A batch of the lanes policy: each row goes on from `state` [blocks, hidden] (its lane's
        final state after the previous batch) where `carry` [blocks] is true, from zero elsewhere,
        and resets only where a sequence starts. -> (outputs [blocks, t_max, outputs], the final
        state [blocks, hidden], to pass on, detached for truncated back-propagation)."""
        blocks = data.size(0)
        keep = torch.ops.bload.reset_mask(table, blocks, data.size(1), True).logical_not()
        state = state * carry.to(state.device, state.dtype).unsqueeze(1)
        return self._run(data, keep, state)

    def _run(
        self, data: torch.Tensor, keep: torch.Tensor, state: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        # keep is 0 on the steps where the state resets: multiplying zeroes it there, and keeps
        # the step differentiable everywhere else.
        keep = keep.to(data.device, data.dtype)
        states = []
        for step in range(data.size(1)):
            state = self.cell(data[:, step], state * keep[:, step].unsqueeze(1))
            states.append(state)
        return self.head(torch.stack(states, 1)), state
