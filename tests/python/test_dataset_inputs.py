"""bload.BlockDataset's checks of what it is given: its options at construction (t_max, the
paddings), each refused naming the option, its value and what is expected; and the items of a
batch, whose data and target must each be a tensor in every item or a dict with the same keys in
every item, whichever item comes first in the table: an item unlike the batch's first is named,
with what it held and what the first held (a key no longer dropped, no bare KeyError or
TorchScript cast error), as is one whose dtype or shape after its steps is not the first's."""

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


# Items: whole reads, and reads of ranges; and through the item pool's threads.
KINDS = [
    pytest.param(Items, False, id="items"),
    pytest.param(Ranges, False, id="ranges"),
    pytest.param(Items, True, id="item pool"),
]


@pytest.mark.parametrize("kind, pool", KINDS)
def test_a_key_the_first_item_lacks_is_refused_not_dropped(kind, pool):
    """The table's first item lacks "b", the others have it: "b" was dropped from the batch."""
    _, sequences = first_batch()
    first, other = sequences[0], sequences[1]

    def make(index, data, target):
        return (without("b")(data) if index == first else data), target

    message = (
        rf"{name(kind, other)} data has keys \['a', 'b'\], where the batch's first item, "
        rf"{name(kind, first)}, has \['a'\] \({name(kind, first)} lacks \['b'\]\): expected "
        r"every item's data to be a tensor \[T, \.\.\.\], or every one a dict with the same keys"
    )
    with pytest.raises(ValueError, match=message):
        packed(kind, make, pool)


@pytest.mark.parametrize("kind, pool", KINDS)
def test_a_key_a_later_item_lacks_is_named(kind, pool):
    """The last row's item lacks "b" (a bare KeyError: 'b' before), and another its key "c"
    instead: both differences named."""
    _, sequences = first_batch()
    first, last = sequences[0], sequences[-1]

    def make(index, data, target):
        if index == last:
            data = dict(without("b")(data), c=data["b"])
        return data, target

    message = (
        rf"{name(kind, last)} data has keys \['a', 'c'\], where the batch's first item, "
        rf"{name(kind, first)}, has \['a', 'b'\] \({name(kind, last)} lacks \['b'\]; "
        rf"{name(kind, first)} lacks \['c'\]\)"
    )
    with pytest.raises(ValueError, match=message):
        packed(kind, make, pool)


def test_the_targets_keys_are_checked_too():
    _, sequences = first_batch()
    last = sequences[-1]

    def make(index, data, target):
        extra = {"mask": target.bool()} if index == last else {}
        return data, {"labels": target, **extra}

    message = rf"dataset\[{last}\] target has keys \['labels', 'mask'\], where the batch's first"
    with pytest.raises(ValueError, match=message):
        packed(Items, make)


def test_keys_in_another_order_pack_by_name():
    """The same keys in another order are the same keys: packed by name, as the first has them."""
    _, sequences = first_batch()
    later = sequences[-1]

    def make(index, data, target):
        return (dict(reversed(data.items())) if index == later else data), target

    batch = packed(Items, make)
    assert list(batch.data) == ["a", "b"]
    expected = packed(Items, None)
    for key in ("a", "b"):
        assert torch.equal(batch.data[key], expected.data[key])


@pytest.mark.parametrize("kind, pool", KINDS)
@pytest.mark.parametrize("dict_first", [True, False], ids=["dict first", "tensor first"])
def test_a_dict_among_tensors_is_named_with_what_the_first_held(kind, pool, dict_first):
    """Before: a TorchScript cast error (a dict among tensors) or `new(): invalid data type
    'str'` (a tensor among dicts), naming no item."""
    _, sequences = first_batch()
    first, other = sequences[0], sequences[1]  # the first item unlike the first: row 1's
    odd = other if dict_first else first

    def make(index, data, target):
        return (data["a"] if index == odd else data), target

    held = {first: "a dict of keys \\['a', 'b'\\]", other: "a tensor"}
    if not dict_first:
        held = {first: "a tensor", other: "a dict of keys \\['a', 'b'\\]"}
    message = (
        rf"{name(kind, other)} data is {held[other]}, where the batch's first item, "
        rf"{name(kind, first)}, has {held[first]}: expected every item's data"
    )
    with pytest.raises(TypeError, match=message):
        packed(kind, make, pool)


@pytest.mark.parametrize(
    "change, error, expected",
    [
        (
            lambda data: data.double(),
            TypeError,
            r"data: expected dtype Float like dataset\[{first}\] data \(the batch's first item\), "
            "got Double",
        ),
        (
            lambda data: data[:, :1],
            ValueError,
            r"data: expected shape \[steps, \[2\]\] like dataset\[{first}\] data \(the batch's "
            r"first item\), got \[\d+, 1\]",
        ),
    ],
    ids=["dtype", "shape"],
)
def test_an_item_of_another_dtype_or_shape_is_named(change, error, expected):
    """Before: the kernel's RuntimeError naming sequences[i], a row of a list the user never
    made."""
    _, sequences = first_batch()
    first, later = sequences[0], sequences[-1]

    def make(index, data, target):
        return (change(data) if index == later else data), target

    batch, _ = first_batch()
    dataset = bload.BlockDataset(Items(make, dict_data=False), T_MAX)
    with pytest.raises(error, match=rf"dataset\[{later}\] " + expected.format(first=first)):
        dataset.__getitems__(batch)


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
