"""A state-space style model trained with the lanes policy through a varlen kernel: a gated linear
recurrence h_t = a_t * h_{t-1} + u_t run over the batch's pieces end to end (`cu_seqlens`), with
one initial state per piece and one final state per piece, as mamba's chunked scan or fla's
chunk_gated_delta_rule take them. The batch's `state_in` says which piece starts from its lane's
saved state, `state_out` which piece's final state each lane keeps (docs/state_kernels.md), so
every sequence, however long, runs as if whole, t_max steps a batch:

    python examples/state_kernel.py

The kernel here is plain PyTorch, chunked the way such kernels are; a real one takes the same
arguments.
"""

import os

import bload
import torch
from torch.utils.data import DataLoader

LENGTHS = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "data", "action_genome_like.lengths"
)
FEATURES, HIDDEN, CHUNK = 4, 8, 16


class Clips(torch.utils.data.Dataset):
    """Clip i: (features [T_i, 4], target [T_i, 1]), the target the running mean of feature 0."""

    def __init__(self, lengths, dtype=torch.float64):
        self.lengths, self.dtype = [int(n) for n in lengths], dtype

    def __len__(self):
        return len(self.lengths)

    def __getitem__(self, i):
        x = torch.randn(
            self.lengths[i], FEATURES, generator=torch.Generator().manual_seed(i), dtype=self.dtype
        )
        return x, x[:, :1].cumsum(0) / torch.arange(1, len(x) + 1, dtype=self.dtype).unsqueeze(1)


def chunked_linear_recurrence(a, u, cu_seqlens, initial_states, chunk=CHUNK):
    """h_t = a_t * h_{t-1} + u_t over every piece [cu_seqlens[i], cu_seqlens[i + 1]) of the tokens
    a, u [tokens, D], piece i from initial_states[i]: (h [tokens, D], final states [pieces, D]).
    Inside a chunk every step at once, from cumulative log-decays; between chunks, one state."""
    outputs, finals = [], []
    bounds = cu_seqlens.tolist()
    for piece, (start, end) in enumerate(zip(bounds[:-1], bounds[1:])):
        state = initial_states[piece]
        for first in range(start, end, chunk):
            last = min(first + chunk, end)
            log_decay = a[first:last].log().cumsum(0)  # [C, D]: log(a_first * ... * a_t)
            # decay[t, s] = a_{s+1} * ... * a_t for s <= t: how much of u_s is left at step t.
            steps = torch.arange(last - first, device=a.device)
            causal = (steps[:, None] >= steps[None, :]).unsqueeze(-1)
            gap = (log_decay[:, None] - log_decay[None, :]).masked_fill(~causal, float("-inf"))
            h = log_decay.exp() * state + (gap.exp() * u[first:last][None]).sum(1)
            outputs.append(h)
            state = h[-1]
        finals.append(state)
    if not finals:  # a batch of padding only
        return a.new_zeros(0, a.size(-1)), initial_states
    return torch.cat(outputs), torch.stack(finals)


class GatedRecurrence(torch.nn.Module):
    """Input-dependent decay a_t = sigmoid(W_a x_t) and input u_t = W_u x_t, a linear readout."""

    def __init__(self, dtype=torch.float64):
        super().__init__()
        self.gate = torch.nn.Linear(FEATURES, HIDDEN, dtype=dtype)
        self.input = torch.nn.Linear(FEATURES, HIDDEN, dtype=dtype)
        self.head = torch.nn.Linear(HIDDEN, 1, dtype=dtype)

    def forward(self, x, cu_seqlens, initial_states):  # x [tokens, FEATURES], pieces end to end
        h, final_states = chunked_linear_recurrence(
            torch.sigmoid(self.gate(x)), self.input(x), cu_seqlens, initial_states
        )
        return self.head(h), final_states


def main():
    lengths = bload.read_lengths(LENGTHS)[:400]  # 3 to 94 steps: many longer than t_max
    t_max = 32
    sampler = bload.BlockSampler(lengths, t_max, blocks_per_batch=8, policy="lanes", seed=0)
    loader = DataLoader(
        bload.BlockDataset(Clips(lengths), t_max), batch_sampler=sampler, collate_fn=bload.collate
    )
    torch.manual_seed(0)
    model = GatedRecurrence()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    lanes = bload.LaneState(sampler, (HIDDEN,), dtype=torch.float64)  # every row's lane state
    for epoch in range(2):
        sampler.set_epoch(epoch)
        total, steps = 0.0, 0
        for batch in loader:
            x, target = batch.data[batch.valid], batch.target[batch.valid]  # cu_seqlens' order
            # Pieces that go on from the previous batch start from their lane's state
            # (lanes.state[batch.state_in], zeros where -1); the rest from zeros.
            y, final_states = model(x, batch.cu_seqlens, lanes.initial_pieces(batch))
            # Each lane keeps the final state of its piece that goes on next batch
            # (final_states[batch.state_out] where not -1), detached: truncated back-propagation.
            lanes.update_pieces(batch, final_states)
            loss = (y - target).pow(2).sum() / max(len(y), 1)  # a batch may be padding only
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total, steps = total + loss.item() * len(y), steps + len(y)
        print(
            f"epoch {epoch}: {len(sampler)} batches of {sampler.blocks_per_batch} lanes, mean loss {total / steps:.4f}"
        )


if __name__ == "__main__":
    main()
