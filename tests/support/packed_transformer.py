"""The attention test model: a small causal transformer (one attention layer and an MLP, learned
positions counted from each piece's start) over packed blocks [blocks, t_max, features].

- `forward(data, table)` is TorchScript's and C++'s form, the recurrent model's signature: SDPA
  with bload's dense block-diagonal causal mask (`torch.ops.bload.attention_mask`), positions
  from the table. models.py saves it scripted; the C++ trainer loads the file with --model FILE.
- `forward_with(data, positions, attend)` is the eager form, for any attention function
  `attend(q, k, v)`: flex_attention with a batch's BlockMask (`with_block_mask`), SDPA with the
  dense mask (`with_mask`), or one sequence alone (`causal_alone`).

Both give each piece of a packed batch the outputs it gets run alone: tests/python/
test_attention_model.py checks outputs and gradients (float64, 1e-10).
"""

from typing import Callable

import bload  # noqa: F401  (loads torch.ops.bload, which forward calls)
import torch
from running_sum import FEATURES
from torch import nn
from torch.nn.attention.flex_attention import flex_attention

WIDTH, HEADS, MAX_POSITIONS = 32, 2, 128


def piece_positions(table: torch.Tensor, blocks: int, t_max: int) -> torch.Tensor:
    """int64 [blocks, t_max]: each step's index in its piece (from 0 at every piece, as the loader's
    positions="piece" gives them on real steps); padding counts on from the piece before it."""
    steps = torch.arange(t_max, device=table.device).expand(blocks, t_max)
    starts = torch.ops.bload.reset_mask(table, blocks, t_max, False).to(table.device)
    return steps - (steps * starts).cummax(1).values


class PackedTransformer(nn.Module):
    def __init__(
        self,
        features: int = FEATURES,
        width: int = WIDTH,
        heads: int = HEADS,
        max_positions: int = MAX_POSITIONS,
        outputs: int = 1,
    ):
        super().__init__()
        self.heads, self.max_positions = heads, max_positions
        self.embed = nn.Linear(features, width)
        self.position = nn.Embedding(max_positions, width)
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width)
        )
        self.head = nn.Linear(width, outputs)

    def forward(self, data: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        """data [blocks, t_max, features] and the batch's block table -> [blocks, t_max,
        outputs]."""
        blocks, t_max = data.size(0), data.size(1)
        mask = torch.ops.bload.attention_mask(table, blocks, t_max, True).to(data.device)
        hidden, q, k, v = self._project(data, piece_positions(table, blocks, t_max))
        attended = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask.unsqueeze(1))
        return self._finish(hidden, attended)

    @torch.jit.ignore
    def forward_with(self, data, positions, attend: Callable):
        """Eager: `attend(q, k, v)` takes and returns [blocks, heads, steps, head_width]."""
        hidden, q, k, v = self._project(data, positions)
        return self._finish(hidden, attend(q, k, v))

    def _project(self, data: torch.Tensor, positions: torch.Tensor):
        if data.size(1) > self.max_positions:
            raise ValueError(
                f"t_max = {data.size(1)}: expected at most max_positions = {self.max_positions}"
            )
        blocks, steps = data.size(0), data.size(1)
        hidden = self.embed(data) + self.position(positions)
        qkv = self.qkv(hidden).view(blocks, steps, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        return hidden, qkv[0], qkv[1], qkv[2]

    def _finish(self, hidden: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        blocks, steps = hidden.size(0), hidden.size(1)
        hidden = hidden + self.out(attended.transpose(1, 2).reshape(blocks, steps, -1))
        hidden = hidden + self.mlp(self.norm(hidden))
        return self.head(hidden)


def causal_alone(q, k, v):
    """SDPA over one sequence alone, causal."""
    return nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def with_mask(mask):
    """SDPA with bload's dense mask [blocks, t_max, t_max]."""
    return lambda q, k, v: nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask.unsqueeze(1)
    )


def with_block_mask(block_mask):
    """flex_attention (eager) with bload's BlockMask."""
    return lambda q, k, v: flex_attention(q, k, v, block_mask=block_mask)
