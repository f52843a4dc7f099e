"""bload.BlockDataset's checks of what it is given: its options at construction (t_max, the
paddings), each refused naming the option, its value and what is expected."""

import re

import bload
import pytest
import torch
from conftest import COLUMN

LENGTHS = [3, 5, 2, 4]
T_MAX = 8


class Items(torch.utils.data.Dataset):
    """Item i: data {"a": [T_i, 2], "b": [T_i]} (or a tensor [T_i, 2]), target [T_i]; `make(i,
    data, target)` changes an item, for the item the test chooses."""

    def __init__(self, make=None, dict_data=True):
        self.make, self.dict_data = make, dict_data

    def __len__(self):
        return len(LENGTHS)

    def _item(self, index, offset, length):
        steps = torch.arange(offset, offset + length, dtype=torch.float32) + 100 * index
        if self.dict_data:
            data = {"a": torch.stack([steps, -steps], 1), "b": steps.clone()}
        else:
            data = torch.stack([steps, -steps], 1)
        target = steps.long()
        if self.make is not None:
            data, target = self.make(index, data, target)
        return data, target

    def __getitem__(self, index):
        return self._item(index, 0, LENGTHS[index])


class Ranges(Items):
    def get_range(self, index, offset, length):
        return self._item(index, offset, length)


def first_batch():
    """A batch of every sequence, and the sequences of its table's rows in order."""
    batch = next(iter(bload.BlockSampler(LENGTHS, T_MAX, 2, seed=1)))
    sequences = batch.table[:, COLUMN["sequence"]].tolist()
    assert sorted(sequences) == list(range(len(LENGTHS)))  # every item in the one batch
    return batch, sequences


def packed(kind, make, pool=False, **options):
    batch, _ = first_batch()
    dataset = bload.BlockDataset(
        kind(make), T_MAX, item_pool=bload.ItemPool(2) if pool else None, **options
    )
    return dataset.__getitems__(batch)


def name(kind, sequence):
    if kind is Ranges:
        return rf"dataset\.get_range\({sequence}, 0, {LENGTHS[sequence]}\)"
    return rf"dataset\[{sequence}\]"


def without(key):
    return lambda data: {name: steps for name, steps in data.items() if name != key}


@pytest.mark.parametrize(
    "options, error, message",
    [
        ({"target_padding": True}, TypeError, "target_padding = True: expected a number"),
        ({"data_padding": False}, TypeError, "data_padding = False: expected a number"),
        ({"data_padding": None}, TypeError, "data_padding = None: expected a number"),
        ({"data_padding": "x"}, TypeError, "data_padding = 'x': expected a number"),
        (
            {"data_padding": torch.tensor(1.0)},
            TypeError,
            r"data_padding = tensor\(1\.\): expected a number",
        ),
        (
            {"target_padding": 2**63},
            ValueError,
            f"target_padding = {2**63}: expected an int from {-(2**63)} to {2**63 - 1}",
        ),
        (
            {"target_padding": -(2**63) - 1},
            ValueError,
            f"target_padding = {-(2**63) - 1}: expected an int from",
        ),
    ],
)
def test_a_padding_that_is_not_a_number_is_refused_at_construction(options, error, message):
    with pytest.raises(error, match=message):
        bload.BlockDataset(Items(), T_MAX, **options)


def test_paddings_that_are_numbers_pack():
    """Ints and floats are taken, int64's extremes and NaN included, and numpy's numbers too (a
    numpy float32 was a TorchScript cast error)."""
    np = pytest.importorskip("numpy")
    batch, _ = first_batch()
    for data_padding, target_padding in [
        (-1.5, 2**63 - 1),
        (float("nan"), -(2**63)),
        (np.float32(0.5), np.int64(-1)),
    ]:
        packed = bload.BlockDataset(
            Items(dict_data=False),
            T_MAX,
            data_padding=data_padding,
            target_padding=target_padding,
        ).__getitems__(batch)
        valid = packed.valid
        assert packed.target[~valid].eq(int(target_padding)).all()
        assert torch.equal(
            packed.data[~valid],
            torch.full_like(packed.data[~valid], float(data_padding)),
        ) or (data_padding != data_padding and packed.data[~valid].isnan().all())


@pytest.mark.parametrize(
    "t_max, error, message",
    [
        (8.0, TypeError, "t_max = 8.0: expected an int"),
        (True, TypeError, "t_max = True: expected an int"),
        ("8", TypeError, "t_max = '8': expected an int"),
        (0, ValueError, "t_max = 0: expected an int from 1 to"),
    ],
)
def test_a_t_max_that_is_not_a_positive_int_is_refused_at_construction(t_max, error, message):
    with pytest.raises(error, match=re.escape(message)):
        bload.BlockDataset(Items(), t_max)
