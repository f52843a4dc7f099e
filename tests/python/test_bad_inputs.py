"""Inputs that bload must refuse with a message naming what is wrong (issue 26): padding that the
dtype cannot hold, meta tensors where values are needed, and a dataset of another size than the
lengths the sampler plans with."""

import bload
import pytest
import torch
from bload import ops


def one_piece():
    """A table of one sequence of 3 steps in a block of 4: one step of padding."""
    return torch.tensor([[0, 0, 3, 0, 0, 3]])


@pytest.mark.parametrize(
    "dtype, padding, expected",
    [
        (torch.int64, 1.5, "padding_value = 1.5: expected an integer in ["),
        (torch.int64, 1e20, "padding_value = 1e+20: expected an integer in ["),
        (torch.uint8, -1, "padding_value = -1: expected an integer in [0, 255]"),
        (torch.bool, 2, "padding_value = 2: expected 0 or 1"),
        (torch.float16, 1e6, "padding_value = 1e+06: expected a value within"),
    ],
)
def test_padding_the_dtype_cannot_hold_is_refused(dtype, padding, expected):
    sequence = torch.zeros(3, dtype=dtype)
    with pytest.raises(RuntimeError, match=expected.replace("[", r"\[").replace("+", r"\+")):
        ops.pack([sequence], one_piece(), 1, 4, padding)
    with pytest.raises(RuntimeError, match="padding_value"):
        ops.pack([sequence], one_piece(), 1, 4, padding, out=torch.empty(1, 4, dtype=dtype))


def test_padding_the_dtype_holds_packs():
    packed = ops.pack([torch.arange(3)], one_piece(), 1, 4, -100.0)
    assert packed.tolist() == [[0, 1, 2, -100]]
    assert ops.pack([torch.zeros(3)], one_piece(), 1, 4, float("-inf"))[0, 3] == float("-inf")
    assert ops.pack([torch.ones(3, dtype=torch.bool)], one_piece(), 1, 4, 0).tolist() == [
        [True] * 3 + [False]
    ]


def test_a_batch_of_no_sequence_checks_the_padding_against_out():
    """No sequence to take the dtype from: pack_into takes out's, and checks the padding."""
    no_row = one_piece()[:0]
    with pytest.raises(RuntimeError, match=r"padding_value = 1.5: expected an integer in \["):
        ops.pack([], no_row, 1, 4, 1.5, out=torch.empty(1, 4, dtype=torch.int64))
    with pytest.raises(RuntimeError, match="padding_value = 2: expected 0 or 1"):
        ops.pack([], no_row, 1, 4, 2, out=torch.empty(1, 4, dtype=torch.bool))
    out = ops.pack([], no_row, 2, 4, -7, out=torch.zeros(2, 4, 3, dtype=torch.int16))
    assert torch.equal(out, torch.full((2, 4, 3), -7, dtype=torch.int16))
    # A table with rows still needs its sequences.
    with pytest.raises(RuntimeError, match="sequences: expected 1 tensors, one per table row"):
        ops.pack([], one_piece(), 1, 4, 0, out=torch.empty(1, 4))


class Sequences(torch.utils.data.Dataset):
    """Sequence i: `lengths[i]` steps of value i, targets i (int64)."""

    def __init__(self, lengths):
        self.lengths = lengths

    def __len__(self):
        return len(self.lengths)

    def __getitem__(self, index):
        steps = torch.full((self.lengths[index],), float(index))
        return steps, torch.full((self.lengths[index],), index)


def test_the_dataset_names_its_padding_option():
    lengths = [3, 2, 4]
    sampler = bload.BlockSampler(lengths, 9)
    dataset = bload.BlockDataset(Sequences(lengths), 9, target_padding=-100.7)
    with pytest.raises(ValueError, match=r"target_padding = -100.7: expected an integer in \["):
        dataset.__getitems__(next(iter(sampler)))


def test_a_batch_of_empty_blocks_names_its_padding_option():
    """Rank 0's first batch is one empty block (pad_to_max rounds 3 blocks up to 4 on 2 ranks):
    its padding is checked as any batch's, against the target's dtype."""
    lengths = [5, 7, 3]
    sampler = bload.BlockSampler(lengths, 8, world_size=2, rank=0, policy="pad_to_max")
    request = next(iter(sampler))
    assert request.table.shape[0] == 0  # the precondition: a batch without a piece
    dataset = bload.BlockDataset(Sequences(lengths), 8, target_padding=-100.7)
    with pytest.raises(ValueError, match=r"target_padding = -100.7: expected an integer in \["):
        dataset.__getitems__(request)


def test_a_dataset_of_another_size_is_refused():
    lengths = [3, 2, 4, 1]
    batch = next(iter(bload.BlockSampler(lengths, 9)))
    assert batch.sequences == 4
    dataset = bload.BlockDataset(Sequences(lengths[:3]), 9)
    with pytest.raises(
        ValueError, match="dataset has 3 sequences: expected 4, the lengths the sampler plans with"
    ):
        dataset.__getitems__(batch)


def test_meta_tensors_have_no_values():
    expected = "a meta tensor has no values: expected {0} on the CPU or another device with data"
    with pytest.raises(RuntimeError, match="table: " + expected.format("table")):
        ops.unpack(torch.zeros(1, 4, device="meta"), one_piece().to("meta"))
    with pytest.raises(RuntimeError, match="lengths: " + expected.format("lengths")):
        bload.BlockSampler(torch.tensor([3, 2]).to("meta"), 9)
    with pytest.raises(RuntimeError, match="lengths: " + expected.format("lengths")):
        torch.classes.bload.Planner(torch.tensor([3, 2]).to("meta"), 9)
