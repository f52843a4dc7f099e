"""pack's ways in and out: sequences given whole or as their pieces alone, pack_into (out=) a
caller's buffer, and every output element written (padding only in the gaps), checked against a
reference built step by step in Python on random plans, for several dtypes and trailing shapes.
The tests taking `device` run on the CPU and, where torch sees one, on CUDA (conftest.DEVICES)."""

import bload
import pytest
import torch
from bload import ops
from torch.library import opcheck

COLUMN = ops.COLUMN


def reference_pack(sequences, table, blocks, t_max, padding):
    """The packed tensor by definition: padding, then each row's piece laid at its place."""
    first = sequences[0]
    out = torch.full((blocks, t_max, *first.shape[1:]), padding, dtype=first.dtype)
    for sequence, row in zip(sequences, table.tolist()):
        block, at, length = row[COLUMN["block"]], row[COLUMN["block_offset"]], row[COLUMN["length"]]
        start = row[COLUMN["offset"]] if len(sequence) == row[COLUMN["sequence_length"]] else 0
        out[block, at : at + length] = sequence[start : start + length]
    return out


def random_batches(seed, split):
    """Block tables of a random plan's batches, and whole sequences whose every step differs."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 60 if split else 25, (60,), generator=generator)
    sampler = bload.BlockSampler(lengths, 24, 3, world_size=1, rank=0, seed=seed, split=split)
    whole = [torch.arange(int(n)) + 1000 * i for i, n in enumerate(lengths)]
    return list(sampler), whole


def rows_of(batch, whole, pieces_alone):
    """Each table row's tensor: its sequence's whole steps, or only the piece's."""
    rows = []
    for row in batch.table.tolist():
        sequence = whole[row[COLUMN["sequence"]]]
        if pieces_alone:
            offset, length = row[COLUMN["offset"]], row[COLUMN["length"]]
            sequence = sequence[offset : offset + length]
        rows.append(sequence)
    return rows


@pytest.mark.parametrize("pieces_alone", [False, True])
@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize(
    "dtype, trailing",
    [(torch.float32, (3,)), (torch.int64, ()), (torch.bool, (2,)), (torch.float16, (2, 2))],
)
def test_pack_and_pack_into_match_the_reference(pieces_alone, split, dtype, trailing, device):
    batches, whole = random_batches(seed=3, split=split)
    padding = 1 if dtype == torch.bool else 7  # a value every dtype holds (bool: true)
    for batch in batches:
        if len(batch.table) == 0:
            continue
        rows = [
            (
                steps.to(dtype)
                if not trailing
                else steps.to(dtype).view(-1, *[1] * len(trailing)).expand(-1, *trailing)
            )
            for steps in rows_of(batch, whole, pieces_alone)
        ]
        want = reference_pack(rows, batch.table, batch.blocks, batch.t_max, padding)
        rows = [row.to(device) for row in rows]
        packed = ops.pack(rows, batch.table, batch.blocks, batch.t_max, padding)
        assert packed.device.type == device and torch.equal(packed.cpu(), want)
        # A reused buffer holding anything: every element is written again.
        out = torch.empty_like(want, device=device).fill_(3)
        got = ops.pack(rows, batch.table, batch.blocks, batch.t_max, padding, out=out)
        assert got.data_ptr() == out.data_ptr()
        assert torch.equal(out.cpu(), want)


def test_pack_into_into_a_non_contiguous_buffer(device):
    batches, whole = random_batches(seed=5, split=True)
    batch = next(b for b in batches if len(b.table))
    rows = [steps.float().unsqueeze(1) for steps in rows_of(batch, whole, False)]
    wide = torch.zeros(batch.blocks, batch.t_max, 2, device=device)
    out = wide[:, :, 1:]  # every other element of the buffer
    ops.pack(
        [row.to(device) for row in rows], batch.table, batch.blocks, batch.t_max, -1.0, out=out
    )
    assert torch.equal(
        out.cpu(), reference_pack(rows, batch.table, batch.blocks, batch.t_max, -1.0)
    )
    assert torch.all(wide[:, :, 0] == 0)


def test_pack_into_passes_opcheck(device):
    batches, whole = random_batches(seed=7, split=True)
    batch = next(b for b in batches if len(b.table))
    rows = [steps.float().unsqueeze(1).to(device) for steps in rows_of(batch, whole, True)]
    out = torch.empty(batch.blocks, batch.t_max, 1, device=device)
    opcheck(torch.ops.bload.pack_into, (out, rows, batch.table.to(device), 0.0))


def test_pack_backward_of_pieces_alone(device):
    """The gradient of a piece given alone is the gradient at its steps, nothing else."""
    batches, whole = random_batches(seed=9, split=True)
    batch = next(b for b in batches if len(b.table) > 1)
    rows = [
        steps.double().unsqueeze(1).to(device).requires_grad_()
        for steps in rows_of(batch, whole, True)
    ]
    weights = torch.randn(batch.blocks, batch.t_max, 1, dtype=torch.double, device=device)
    (ops.pack(rows, batch.table, batch.blocks, batch.t_max) * weights).sum().backward()
    for row, sequence in zip(batch.table.tolist(), rows):
        block, at = row[COLUMN["block"]], row[COLUMN["block_offset"]]
        assert sequence.grad.device.type == device
        assert torch.equal(sequence.grad, weights[block, at : at + len(sequence)])


def message(call, error_type=RuntimeError):
    with pytest.raises(error_type) as error:
        call()
    return str(error.value).splitlines()[0]


TABLE = torch.tensor([[0, 0, 3, 5, 0, 3], [0, 3, 2, 1, 0, 2], [1, 0, 4, 7, 2, 6]])
SEQUENCES = [torch.zeros(3, 2), torch.zeros(2, 2), torch.zeros(6, 2)]


def test_pack_into_a_buffer_of_another_batch_shape():
    error = message(lambda: ops.pack(SEQUENCES, TABLE, 2, 6, out=torch.zeros(2, 5, 2)), ValueError)
    assert error == "out: expected shape [blocks, t_max, ...] = [2, 6, ...], got [2, 5, 2]"


@pytest.mark.parametrize(
    "out, expected",
    [
        (
            torch.zeros(2, 6, 3),
            "out: expected shape [blocks, t_max, [2]] (the sequences' trailing shape)",
        ),
        (
            torch.zeros(2, 6, 2, dtype=torch.int64),
            "out: expected dtype Float on cpu like the sequences, got Long",
        ),
    ],
)
def test_pack_into_names_a_bad_buffer(out, expected):
    assert expected in message(lambda: ops.pack(SEQUENCES, TABLE, 2, 6, out=out))


def test_pack_into_refuses_gradients():
    rows = [sequence.clone().requires_grad_() for sequence in SEQUENCES]
    error = message(lambda: ops.pack(rows, TABLE, 2, 6, out=torch.zeros(2, 6, 2)))
    assert "sequences[0] requires grad: pack with out= records no gradient" in error
    with torch.no_grad():
        ops.pack(rows, TABLE, 2, 6, out=torch.zeros(2, 6, 2))


def test_a_sequence_neither_whole_nor_its_piece_is_named():
    rows = [SEQUENCES[0], SEQUENCES[1], torch.zeros(5, 2)]
    assert message(lambda: ops.pack(rows, TABLE, 2, 6)) == (
        "sequences[2] has 5 steps: expected 6, the length of sequence 7 in table row 2 (or 4, its piece alone)"
    )
