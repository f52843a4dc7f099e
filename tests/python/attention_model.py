"""A small causal transformer for the tests: one attention layer and an MLP over [blocks, steps,
features] with learned positions, its attention given as a function, so that the same weights run
packed (SDPA with bload's dense mask, flex_attention with its BlockMask) and on each sequence
alone (SDPA, causal)."""

import torch
from torch import nn
from torch.nn.attention.flex_attention import flex_attention


class TinyCausalTransformer(nn.Module):
    def __init__(self, features, width=16, heads=2, max_positions=128):
        super().__init__()
        self.heads = heads
        self.embed = nn.Linear(features, width)
        self.position = nn.Embedding(max_positions, width)
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width)
        )
        self.head = nn.Linear(width, 1)

    def forward(self, x, positions, attend):
        """x [blocks, steps, features], positions [blocks, steps] -> [blocks, steps]; `attend(q, k,
        v)` takes and returns [blocks, heads, steps, head_width]."""
        blocks, steps, _ = x.shape
        hidden = self.embed(x) + self.position(positions)
        q, k, v = self.qkv(hidden).view(blocks, steps, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        attended = attend(q, k, v).transpose(1, 2).reshape(blocks, steps, -1)
        hidden = hidden + self.out(attended)
        hidden = hidden + self.mlp(self.norm(hidden))
        return self.head(hidden).squeeze(-1)


def causal_alone(q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def with_mask(mask):
    """SDPA with bload's dense mask [blocks, t_max, t_max]."""
    return lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask.unsqueeze(1)
    )


def with_block_mask(block_mask):
    """flex_attention (eager) with bload's BlockMask."""
    return lambda q, k, v: flex_attention(q, k, v, block_mask=block_mask)
