"""torch.ops.bload in eager mode, TorchScript and torch.compile, checked with opcheck, and the
errors bad inputs get. The tests taking `device` run on the CPU and, where torch sees one, on
CUDA (conftest.DEVICES; tests/gpu/run.sh runs the CUDA ones)."""

import pytest
import torch
from torch.library import opcheck

ops = torch.ops.bload

# Block 0: sequence 5 (3 steps), then sequence 1 (2 steps), then 1 step of padding.
# Block 1: steps 2..5 of sequence 7 (6 steps, split), then 2 steps of padding.
TABLE = torch.tensor(
    [
        # block, block_offset, length, sequence, offset, sequence_length
        [0, 0, 3, 5, 0, 3],
        [0, 3, 2, 1, 0, 2],
        [1, 0, 4, 7, 2, 6],
    ]
)
BLOCKS, T_MAX = 2, 6


def sequences(features=2, dtype=torch.float32, device="cpu"):
    """The whole sequences of TABLE's rows, each step holding (sequence * 100 + step)."""
    return [
        (torch.arange(n, dtype=dtype, device=device) + 100 * s).unsqueeze(1).repeat(1, features)
        for s, n in ((5, 3), (1, 2), (7, 6))
    ]


def on_host(tensor, device):
    """The tensor's values, after checking that the operator left it on `device`."""
    assert tensor.device.type == device
    return tensor.cpu()


def test_step_tables_by_hand(device):
    table = TABLE.to(device)  # the operators read it on the host and answer on its device
    assert on_host(ops.reset_mask(table, BLOCKS, T_MAX), device).tolist() == [
        [True, False, False, True, False, False],
        [True, False, False, False, False, False],
    ]
    assert on_host(ops.valid_mask(table, BLOCKS, T_MAX), device).int().tolist() == [
        [1, 1, 1, 1, 1, 0],
        [1, 1, 1, 1, 0, 0],
    ]
    assert on_host(ops.end_mask(table, BLOCKS, T_MAX), device).int().tolist() == [
        [0, 0, 1, 0, 1, 0],
        [0, 0, 0, 1, 0, 0],
    ]
    segments = on_host(ops.segment_ids(table, BLOCKS, T_MAX), device)
    assert segments.dtype == torch.int32
    assert segments.tolist() == [[0, 0, 0, 1, 1, -1], [0, 0, 0, 0, -1, -1]]
    assert on_host(ops.position_ids(table, BLOCKS, T_MAX), device).tolist() == [
        [0, 1, 2, 0, 1, 0],
        [2, 3, 4, 5, 0, 0],
    ]
    cu = on_host(ops.cu_seqlens(table), device)
    assert cu.dtype == torch.int32 and cu.tolist() == [0, 3, 5, 9]
    assert on_host(ops.carry_mask(table, BLOCKS, T_MAX), device).tolist() == [False, True]


def test_pack_and_unpack_by_hand(device):
    packed = on_host(ops.pack(sequences(device=device), TABLE, BLOCKS, T_MAX, -1.0), device)
    assert packed.shape == (2, 6, 2)
    assert packed[..., 0].tolist() == [
        [500, 501, 502, 100, 101, -1],
        [702, 703, 704, 705, -1, -1],
    ]
    pieces = ops.unpack(packed.to(device), TABLE)
    expected = sequences()
    expected[2] = expected[2][2:]
    assert all(torch.equal(on_host(a, device), b) for a, b in zip(pieces, expected))


TABLE_OPS = ["reset_mask", "end_mask", "valid_mask", "segment_ids", "position_ids"]


# opcheck gets every tensor on the device (the table too), as fake tensors need one device.
@pytest.mark.parametrize("name", TABLE_OPS)
def test_opcheck_step_tables(name, device):
    opcheck(getattr(ops, name).default, (TABLE.to(device), BLOCKS, T_MAX))


def test_opcheck_carried_tables(device):
    # TABLE's block 1 opens with a piece that continues its sequence: carried, as lanes carry it.
    opcheck(ops.reset_mask.default, (TABLE.to(device), BLOCKS, T_MAX, True))
    opcheck(ops.carry_mask.default, (TABLE.to(device), BLOCKS, T_MAX))


def test_opcheck_cu_seqlens(device):
    opcheck(ops.cu_seqlens.default, (TABLE.to(device),))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16])
def test_opcheck_pack(dtype, device):
    opcheck(ops.pack.default, (sequences(3, dtype, device), TABLE.to(device), BLOCKS, T_MAX, 0))


def test_opcheck_unpack_schema_and_autograd_registration(device):
    # unpack's output shapes are the table's values, so it has no Meta kernel and cannot be
    # traced with fake tensors; the other checks apply.
    packed = ops.pack(sequences(device=device), TABLE, BLOCKS, T_MAX, 0.0).requires_grad_()
    opcheck(
        ops.unpack.default,
        (packed, TABLE.to(device)),
        test_utils=("test_schema", "test_autograd_registration"),
    )


def test_opcheck_pack_with_gradients(device):
    grads = [s.double().requires_grad_() for s in sequences(device=device)]
    table = TABLE.to(device)
    opcheck(ops.pack.default, (grads, table, BLOCKS, T_MAX, 0.0))
    opcheck(
        ops.pack_backward.default, (torch.randn(BLOCKS, T_MAX, 2, device=device), table, [3, 2, 6])
    )


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_training_through_pack(backend):
    def loss(seqs, table):
        packed = torch.ops.bload.pack(seqs, table, BLOCKS, T_MAX, 0.0)
        valid = torch.ops.bload.valid_mask(table, BLOCKS, T_MAX)
        return (packed.pow(2).sum(-1) * valid).sum()

    torch._dynamo.reset()
    compiled = torch.compile(loss, fullgraph=True, backend=backend)
    eager_inputs = [s.requires_grad_() for s in sequences()]
    compiled_inputs = [s.requires_grad_() for s in sequences()]
    loss(eager_inputs, TABLE).backward()
    compiled(compiled_inputs, TABLE).backward()
    for eager, got in zip(eager_inputs, compiled_inputs):
        assert torch.equal(got.grad, eager.grad)


def test_pack_and_unpack_gradients(device):
    grads = [s.double().requires_grad_() for s in sequences(device=device)]
    assert torch.autograd.gradcheck(lambda *s: ops.pack(list(s), TABLE, BLOCKS, T_MAX, 0.0), grads)
    packed = torch.randn(BLOCKS, T_MAX, 2, dtype=torch.double, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(lambda p: ops.unpack(p, TABLE), (packed,))
    # A piece the loss does not use gets no gradient; padding never does.
    ops.unpack(packed, TABLE)[1].sum().backward()
    assert packed.grad.sum() == 2 * 2 and packed.grad[0, 3:5].eq(1).all()
    assert packed.grad.device.type == device


@torch.jit.script
def scripted_tables(table: torch.Tensor, blocks: int, t_max: int) -> list[torch.Tensor]:
    return [
        torch.ops.bload.reset_mask(table, blocks, t_max),
        torch.ops.bload.valid_mask(table, blocks, t_max),
        torch.ops.bload.segment_ids(table, blocks, t_max),
        torch.ops.bload.position_ids(table, blocks, t_max),
        torch.ops.bload.cu_seqlens(table),
    ]


def eager_tables(table, blocks, t_max):
    return [
        ops.reset_mask(table, blocks, t_max),
        ops.valid_mask(table, blocks, t_max),
        ops.segment_ids(table, blocks, t_max),
        ops.position_ids(table, blocks, t_max),
        ops.cu_seqlens(table),
    ]


def test_torchscript_matches_eager():
    for got, want in zip(scripted_tables(TABLE, BLOCKS, T_MAX), eager_tables(TABLE, BLOCKS, T_MAX)):
        assert torch.equal(got, want)

    @torch.jit.script
    def pack_unpack(seqs: list[torch.Tensor], table: torch.Tensor) -> list[torch.Tensor]:
        return torch.ops.bload.unpack(torch.ops.bload.pack(seqs, table, 2, 6, 0.0), table)

    assert torch.equal(pack_unpack(sequences(), TABLE)[1], sequences()[1])


def masked_features(seqs, table):
    """A compiled graph: packs, masks padding with the valid mask, weights by position."""
    packed = torch.ops.bload.pack(seqs, table, 2, 6, 0.0)
    valid = torch.ops.bload.valid_mask(table, 2, 6)
    position = torch.ops.bload.position_ids(table, 2, 6)
    reset = torch.ops.bload.reset_mask(table, 2, 6)
    weights = (position + 1).to(packed.dtype) * valid.to(packed.dtype)
    return packed * weights.unsqueeze(-1), reset.sum(), torch.ops.bload.cu_seqlens(table)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_fullgraph(backend):
    torch._dynamo.reset()
    compiled = torch.compile(masked_features, fullgraph=True, backend=backend)
    for got, want in zip(compiled(sequences(), TABLE), masked_features(sequences(), TABLE)):
        assert torch.equal(got, want)


def test_torch_export():
    class Tables(torch.nn.Module):
        def forward(self, table):
            return torch.ops.bload.segment_ids(table, 2, 6), torch.ops.bload.cu_seqlens(table)

    exported = torch.export.export(Tables(), (TABLE,))
    got = exported.module()(TABLE)
    assert torch.equal(got[0], ops.segment_ids(TABLE, 2, 6))
    assert torch.equal(got[1], ops.cu_seqlens(TABLE))


def message(call):
    with pytest.raises(RuntimeError) as error:
        call()
    return str(error.value).splitlines()[0]


def with_cell(row, column, value):
    table = TABLE.clone()
    table[row, column] = value
    return table


@pytest.mark.parametrize(
    "call, expected",
    [
        (lambda: ops.reset_mask(TABLE.float(), 2, 6), "table: expected an int64 tensor, got Float"),
        (lambda: ops.valid_mask(TABLE[:, :5], 2, 6), "table: expected shape [pieces, 6]"),
        (lambda: ops.segment_ids(TABLE, 0, 6), "blocks = 0: expected at least 1 block"),
        (lambda: ops.position_ids(TABLE, 2, -3), "t_max = -3: expected at least 1 step"),
        (lambda: ops.reset_mask(TABLE, 1, 6), "table[2, block] = 1: expected a block from 0 to 0"),
        (
            lambda: ops.valid_mask(with_cell(0, 2, 9), 2, 6),
            "table[0, length] = 9: expected from 1 to t_max - block_offset = 6",
        ),
        (
            lambda: ops.valid_mask(with_cell(1, 1, 2), 2, 6),
            "table[1, block_offset] = 2: expected from 3 to t_max - 1 = 5 (pieces of a block in order, not overlapping)",
        ),
        (
            lambda: ops.segment_ids(with_cell(2, 5, 5), 2, 6),
            "table[2, sequence_length] = 5: expected at least offset + length = 6",
        ),
        (lambda: ops.cu_seqlens(with_cell(0, 2, 0)), "table[0, length] = 0: expected at least 1"),
        (
            lambda: ops.pack(sequences()[:2], TABLE, 2, 6),
            "sequences: expected 3 tensors, one per table row, got 2",
        ),
        (lambda: ops.pack([], TABLE[:0], 2, 6), "sequences: expected at least one tensor"),
        (
            lambda: ops.pack(
                [s.double() if i == 1 else s for i, s in enumerate(sequences())], TABLE, 2, 6
            ),
            "sequences[1]: expected dtype Float like sequences[0], got Double",
        ),
        (
            lambda: ops.pack(sequences()[:2] + [torch.zeros(5, 2)], TABLE, 2, 6),
            "sequences[2] has 5 steps: expected 6, the length of sequence 7 in table row 2",
        ),
        (
            lambda: ops.pack(sequences()[:2] + [torch.zeros(6, 2, device="meta")], TABLE, 2, 6),
            "sequences[2]: expected device cpu like sequences[0], got meta",
        ),
        (
            lambda: ops.unpack(torch.zeros(2), TABLE),
            "packed: expected a tensor [blocks, t_max, ...]",
        ),
        (
            lambda: ops.pack(sequences()[:2] + [torch.tensor(1.0)], TABLE, 2, 6),
            "sequences[2]: expected a tensor [steps, ...], got a 0-d tensor",
        ),
        (
            # The table on meta sends the call to the Meta kernel, which must not hand back
            # uninitialised real memory.
            lambda: ops.pack(sequences(), TABLE.to("meta"), 2, 6),
            "sequences[0]: expected a meta tensor, like the other meta arguments, got one on cpu",
        ),
        (
            lambda: ops.pack_backward(torch.ones(2, 6, 2), TABLE, [3, 2, 5]),
            "steps[2] has 5 steps: expected 6, the length of sequence 7 in table row 2",
        ),
        (
            lambda: ops.pack_backward(torch.ones(2, 6, 2), TABLE, [3, 2, -6]),
            "steps[2] has -6 steps: expected 6",
        ),
        (
            lambda: ops.pack_backward(torch.ones(2, 6, 2), TABLE, [3, 2]),
            "steps: expected 3 lengths",
        ),
        (
            lambda: ops.pack_backward(torch.ones(2, 6, 2, device="meta"), TABLE.to("meta"), [3, 2]),
            "steps: expected 3 lengths",
        ),
        (
            lambda: ops.pack_backward(torch.ones(2, 6, 2), TABLE.to("meta"), [3, 2, 6]),
            "grad: expected a meta tensor",
        ),
    ],
)
def test_bad_inputs_raise_runtime_errors_naming_the_argument(call, expected):
    assert expected in message(call)


def test_meta_kernels_check_layout_too():
    meta = TABLE.to("meta")
    assert ops.reset_mask(meta, 2, 6).shape == (2, 6)
    assert ops.cu_seqlens(meta).shape == (4,)
    assert "int64" in message(lambda: ops.reset_mask(meta.float(), 2, 6))


def test_table_columns_are_the_cores_layout():
    # The layout TABLE above is written in; the core defines it, the operator reports it.
    assert torch.ops.bload.table_columns() == [
        "block",
        "block_offset",
        "length",
        "sequence",
        "offset",
        "sequence_length",
    ]


def test_read_lengths_is_the_cores_reader(tmp_path):
    path = tmp_path / "tricky.lengths"
    path.write_bytes(b"# comment\r\n3\r\n\n 7 # seven\n12")
    assert torch.ops.bload.read_lengths(str(path)).tolist() == [3, 7, 12]
    path.write_text("3\nfive\n")
    assert f'{path}:2 = "five": expected one sequence length per line' in message(
        lambda: torch.ops.bload.read_lengths(str(path))
    )
