"""Packed attention is each sequence's own: a small causal transformer (float64) run on bload's
packed batches, with SDPA and the dense mask or flex_attention and the BlockMask, gives every
piece the outputs and the parameter gradients it gets run alone (1e-10), with and without split
sequences, with positions counted from the sequence or from each piece. (flex_attention has no
CPU backward in eager mode: without CUDA its outputs alone are compared.)"""

import bload
import pytest
import torch
from packed_transformer import PackedTransformer, causal_alone, with_block_mask, with_mask
from test_package import Numbered

T_MAX = 24
COLUMN = bload.ops.COLUMN


def batches(split, positions):
    # With split, sequences longer than T_MAX are cut into pieces; without, every one fits.
    lengths = [5, 17, 9, 3, 24, 11, 2, 14] + ([50, 31] if split else [])
    sampler = bload.BlockSampler(lengths, T_MAX, 3, split=split)
    dataset = bload.BlockDataset(Numbered(lengths), T_MAX, positions=positions)
    return list(
        torch.utils.data.DataLoader(dataset, batch_sampler=sampler, collate_fn=bload.collate)
    )


def weights(data):
    """A per-step weight of the loss, from the step's data, so that each step counts differently."""
    return 1.0 + 0.1 * data[..., 0] - 0.03 * data[..., 1]


def gradients(model, loss):
    model.zero_grad()
    loss.backward()
    return [parameter.grad.clone() for parameter in model.parameters()]


@pytest.mark.parametrize("positions", ["sequence", "piece"])
@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("mask", ["sdpa", "flex"])
def test_packed_outputs_and_gradients_equal_each_piece_alone(mask, split, positions):
    torch.manual_seed(0)
    # flex_attention has no backward on the CPU in eager mode: there, its outputs are compared
    # and its gradients only where CUDA is.
    device = "cuda" if mask == "flex" and torch.cuda.is_available() else "cpu"
    backward = mask == "sdpa" or device == "cuda"
    model = PackedTransformer(features=2, width=16).double().to(device)
    all_batches = batches(split, positions)
    assert split == any(
        row[COLUMN["offset"]] > 0 for batch in all_batches for row in batch.table.tolist()
    )
    for batch in all_batches[:3]:
        batch = batch.to(device)
        x = batch.data.double()
        attend = (
            with_mask(batch.attention_mask())
            if mask == "sdpa"
            else with_block_mask(batch.block_mask(block_size=8))
        )
        with torch.set_grad_enabled(backward):
            packed = model.forward_with(x, batch.position_ids, attend)[..., 0]
        if backward:
            packed_grads = gradients(model, (packed * weights(x))[batch.valid].sum())

        alone_loss = 0.0
        for row in batch.table.tolist():
            piece = dict(zip(COLUMN, row))
            steps = slice(piece["block_offset"], piece["block_offset"] + piece["length"])
            first = piece["offset"] if positions == "sequence" else 0
            positions_alone = torch.arange(first, first + piece["length"], device=device)[None]
            with torch.set_grad_enabled(backward):
                alone = model.forward_with(
                    x[piece["block"], steps][None], positions_alone, causal_alone
                )[..., 0]
            torch.testing.assert_close(
                packed[piece["block"], steps].detach(), alone[0].detach(), rtol=0, atol=1e-10
            )
            alone_loss = alone_loss + (alone * weights(x[piece["block"], steps][None])).sum()
        if backward:
            for mine, theirs in zip(packed_grads, gradients(model, alone_loss)):
                torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-10)


@pytest.mark.parametrize("split", [False, True])
def test_the_scripted_model_gives_each_piece_its_outputs_alone(split):
    """The TorchScript form the C++ trainer loads, forward(data, table): its mask and positions
    (from each piece's start) come from the table alone, through bload's operators."""
    torch.manual_seed(1)
    eager = PackedTransformer(features=2, width=16).double()
    model = torch.jit.script(eager)
    for batch in batches(split, "piece")[:3]:
        x = batch.data.double()
        packed = model(x, batch.table)[..., 0]
        assert packed.shape == batch.valid.shape
        for row in batch.table.tolist():
            piece = dict(zip(COLUMN, row))
            steps = slice(piece["block_offset"], piece["block_offset"] + piece["length"])
            positions = torch.arange(piece["length"])[None]
            alone = eager.forward_with(x[piece["block"], steps][None], positions, causal_alone)
            torch.testing.assert_close(
                packed[piece["block"], steps], alone[0, :, 0], rtol=0, atol=1e-10
            )
