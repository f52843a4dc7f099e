"""The recurrent test model, for TorchScript: a GRU cell stepped over each packed block, its state
zeroed wherever the block table starts a sequence (`torch.ops.bload.reset_mask`), and a linear
head on every step. `forward_lanes` runs a batch of the lanes policy, going on from each row's
carried state. packed_gru.h beside this file is the same model in C++; models.py saves it for the
C++ and Rust trainers (examples/packed_gru.py is the examples' own copy, a user's model).
"""

from typing import Tuple

import bload  # noqa: F401  (loads torch.ops.bload, which the model calls)
import torch

FEATURES, HIDDEN, OUTPUTS = 16, 64, 1


class PackedGRU(torch.nn.Module):
    def __init__(self, features: int = FEATURES, hidden: int = HIDDEN, outputs: int = OUTPUTS):
        super().__init__()
        self.cell = torch.nn.GRUCell(features, hidden)
        self.head = torch.nn.Linear(hidden, outputs)
        self.hidden = hidden

    def forward(self, data: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        """data [blocks, t_max, features] and the batch's block table -> [blocks, t_max, outputs]."""
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
        keep = keep.to(data.device, data.dtype)
        states = []
        for step in range(data.size(1)):
            state = self.cell(data[:, step], state * keep[:, step].unsqueeze(1))
            states.append(state)
        return self.head(torch.stack(states, 1)), state
