"""bload.check_isolation, the leak probe users run on their own model: it names the leaks of a
GRU that ignores reset, SDPA with is_causal and no document mask, a Hugging Face model given an
all-ones attention_mask beside packed position_ids (transformers#46634) and a linear recurrence
whose state is not routed by state_in / state_out across lanes batches; it passes bload's own
models, the same attention with the batch's masks, a tiny Llama through hf_kwargs() with eager
and SDPA attention, and the routed recurrence. (transformers' flex_attention on the CPU is
compiled by inductor, and gave a leak in one full-suite run of two, from later pieces into the
first: docs/isolation.md.)"""

import bload
import pytest
import torch
import torch.nn.functional as F

T_MAX = 24
# Sequences longer than T_MAX are split (split=True) or carried across batches (lanes).
LENGTHS = [7, 30, 12, 5, 9, 21, 18, 2, 14, 3, 11, 6, 50, 4]
FEATURES, HIDDEN, VOCABULARY = 3, 8, 40
COLUMN = bload.ops.COLUMN


# Tiny models on one thread (conftest.py's one_thread).
pytestmark = pytest.mark.usefixtures("one_thread")


class Features(torch.utils.data.Dataset):
    """Sequence i: float64 features [T_i, FEATURES] drawn from seed i; target its step numbers."""

    def __getitem__(self, index):
        generator = torch.Generator().manual_seed(index)
        steps = LENGTHS[index]
        data = torch.randn(steps, FEATURES, generator=generator, dtype=torch.float64)
        return data, torch.arange(steps)

    def __len__(self):
        return len(LENGTHS)


class Tokens(Features):
    """Sequence i: token ids [T_i] below VOCABULARY, drawn from seed i."""

    def __getitem__(self, index):
        generator = torch.Generator().manual_seed(index)
        tokens = torch.randint(0, VOCABULARY, (LENGTHS[index],), generator=generator)
        return tokens, tokens


def batches(dataset, policy="best_fit", blocks=3, count=1):
    sampler = bload.BlockSampler(LENGTHS, T_MAX, blocks, policy=policy, split=policy != "lanes")
    packed = bload.BlockDataset(dataset, T_MAX)
    loader = torch.utils.data.DataLoader(packed, batch_sampler=sampler, collate_fn=bload.collate)
    found = []
    for batch in loader:
        found.append(batch)
        if len(found) == count:
            return found
    return found


def with_two_pieces_in_a_row(found):
    return next(b for b in found if len(b.table) > len(b.table[:, COLUMN["block"]].unique()))


def gru(seed=0):
    torch.manual_seed(seed)
    return bload.nn.PackedGRU(FEATURES, HIDDEN, 2).double()


def test_bloads_gru_is_isolated_and_one_that_ignores_reset_leaks_into_the_next_piece():
    batch = with_two_pieces_in_a_row(batches(Features(), count=10))
    model = gru()
    report = bload.check_isolation(model, batch, lambda m, b: m(b.data, b.table))
    assert report.ok and report.documents == len(batch.table[:, COLUMN["sequence"]].unique())
    assert report.largest == 0.0, report  # isolation is exact, not approximate
    assert "isolated" in str(report)

    def no_reset(model, batch):  # the state runs on from one piece into the next one
        state = torch.zeros(batch.blocks, HIDDEN, dtype=torch.float64)
        outputs = []
        for step in range(batch.t_max):
            state = model.cell(batch.data[:, step], state)
            outputs.append(state)
        return model.head(torch.stack(outputs, 1))

    report = bload.check_isolation(model, batch, no_reset)
    assert not report.ok
    # Exactly the pairs (earlier piece -> a later piece of the same row) leak, nothing else.
    expected = set()
    for block in range(batch.blocks):
        row = [r for r in batch.table.tolist() if r[COLUMN["block"]] == block]
        row.sort(key=lambda r: r[COLUMN["block_offset"]])
        sequences = [r[COLUMN["sequence"]] for r in row]
        expected |= {(a, b) for i, a in enumerate(sequences) for b in sequences[i + 1 :]}
    assert {
        (leak.source, leak.affected) for leak in report.leaks if leak.kind == "outputs"
    } == expected
    assert {leak.kind for leak in report.leaks} == {"outputs", "gradients"}
    assert f"sequence {report.leaks[0].source} -> sequence {report.leaks[0].affected}" in str(
        report
    )
    with pytest.raises(AssertionError, match="leaks: perturbing"):
        bload.assert_isolated(model, batch, no_reset)


class Attention(torch.nn.Module):
    """One causal self-attention layer over features, SDPA with the mask its forward is given."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.qkv = torch.nn.Linear(FEATURES, 3 * HIDDEN, dtype=torch.float64)

    def forward(self, data, mask=None, causal=False):
        q, k, v = self.qkv(data).unsqueeze(1).chunk(3, dim=-1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)[:, 0]


def test_sdpa_leaks_with_is_causal_alone_and_is_isolated_with_the_batchs_mask():
    batch = with_two_pieces_in_a_row(batches(Features(), count=10))
    model = Attention()
    leaking = bload.check_isolation(model, batch, lambda m, b: m(b.data, causal=True))
    assert not leaking.ok and leaking.largest > 1e-3
    masked = bload.check_isolation(
        model, batch, lambda m, b: m(b.data, b.attention_mask(causal=True).unsqueeze(1))
    )
    assert masked.ok, masked


def test_flex_attention_with_the_block_mask_is_isolated():
    from torch.nn.attention.flex_attention import flex_attention

    batch = with_two_pieces_in_a_row(batches(Features(), count=10))
    model = Attention()

    def flex(model, batch):
        q, k, v = model.qkv(batch.data).unsqueeze(1).chunk(3, dim=-1)
        return flex_attention(q, k, v, block_mask=batch.block_mask(block_size=8))[:, 0]

    # torch has no CPU backward for flex_attention: outputs only.
    assert bload.check_isolation(model, batch, flex, gradients=False).ok


def tiny_llama(attention):
    pytest.importorskip("transformers")
    from models import tiny_llama as llama

    return llama(VOCABULARY, 4 * T_MAX, attention, seed=2)


def flattened(model, batch):
    kwargs = batch.hf_kwargs(input_ids=batch.data)
    del kwargs["labels"]
    return model(**kwargs)


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_a_tiny_llama_through_hf_kwargs_is_isolated_and_leaks_given_an_all_ones_mask(attention):
    batch = with_two_pieces_in_a_row(batches(Tokens(), count=10))
    model = tiny_llama(attention)
    assert bload.check_isolation(model, batch, flattened).ok

    def all_ones_mask(model, batch):  # transformers#46634: the mask hides the packing
        kwargs = batch.hf_kwargs(input_ids=batch.data)
        ones = torch.ones_like(kwargs["input_ids"])
        return model(
            input_ids=kwargs["input_ids"],
            position_ids=kwargs["position_ids"],
            attention_mask=ones,
            use_cache=False,
        )

    leaking = bload.check_isolation(model, batch, all_ones_mask, gradients=False)
    assert not leaking.ok and leaking.largest > 1e-3

    def with_a_cache(model, batch):  # use_cache left to the config: the model makes a cache
        kwargs = batch.hf_kwargs(input_ids=batch.data)
        return model(input_ids=kwargs["input_ids"], position_ids=kwargs["position_ids"])

    assert not bload.check_isolation(model, batch, with_a_cache, gradients=False).ok


class LinearRecurrence(torch.nn.Module):
    """h_t = decay * h_{t-1} + W x_t over each piece laid end to end (cu_seqlens), from one
    initial state per piece: a state kernel's form (docs/state_kernels.md)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.input = torch.nn.Linear(FEATURES, HIDDEN, dtype=torch.float64)
        self.decay = torch.nn.Parameter(torch.full((HIDDEN,), 0.9, dtype=torch.float64))

    def forward(self, tokens, cu_seqlens, initial):
        drive = self.input(tokens)
        outputs, finals = [], []
        bounds = cu_seqlens.tolist()
        for piece, (start, end) in enumerate(zip(bounds, bounds[1:])):
            state = initial[piece]
            for step in range(start, end):
                state = self.decay * state + drive[step]
                outputs.append(state)
            finals.append(state)
        return torch.stack(outputs), torch.stack(finals)


def routed(model, batches):
    """The lanes' states routed by state_in / state_out, from zeros."""
    state = torch.zeros(batches[0].blocks, HIDDEN, dtype=torch.float64)
    outputs = []
    for batch in batches:
        starts = batch.state_in >= 0
        initial = state[batch.state_in.clamp(min=0)] * starts.unsqueeze(1)
        produced, finals = model(batch.data[batch.valid], batch.cu_seqlens, initial)
        kept = batch.state_out >= 0
        state = state.clone()
        state[kept] = finals[batch.state_out[kept]]
        outputs.append(produced)
    return outputs


def unrouted(model, batches):
    """Each row's first piece goes on from whatever the row's last piece left, carried or not."""
    state = torch.zeros(batches[0].blocks, HIDDEN, dtype=torch.float64)
    outputs = []
    for batch in batches:
        rows = batch.table[:, COLUMN["block"]]
        first = batch.table[:, COLUMN["block_offset"]] == 0
        initial = state[rows] * first.unsqueeze(1)
        produced, finals = model(batch.data[batch.valid], batch.cu_seqlens, initial)
        state = state.clone()
        for piece, row in enumerate(rows.tolist()):  # the row's last piece's state, kept
            state[row] = finals[piece]
        outputs.append(produced)
    return outputs


def test_a_state_kernel_across_lanes_batches_leaks_unless_routed_by_state_in_and_state_out():
    found = batches(Features(), policy="lanes", blocks=2, count=4)
    assert any(bool((b.state_in >= 0).any()) for b in found[1:]), "no carried piece to test"
    model = LinearRecurrence()
    assert bload.check_isolation(model, found, routed).ok
    report = bload.check_isolation(model, found, unrouted)
    assert not report.ok
    # A leak crosses a batch boundary: the affected piece lies in a later batch than the source.
    assert any(leak.batch is not None and leak.batch > 0 for leak in report.leaks)


def test_bloads_gru_over_lanes_batches_is_isolated():
    found = batches(Features(), policy="lanes", blocks=2, count=4)
    model = gru()

    def lanes(model, batches):
        state = torch.zeros(batches[0].blocks, HIDDEN, dtype=torch.float64)
        outputs = []
        for batch in batches:
            produced, state = model.forward_lanes(batch.data, batch.table, batch.carry, state)
            outputs.append(produced)
        return outputs

    assert bload.check_isolation(model, found, lanes).ok


def test_the_probe_refuses_what_it_cannot_read():
    batch = batches(Features())[0]
    model = gru()
    with pytest.raises(ValueError, match="documents: sequence 999 is in none of the batches"):
        bload.check_isolation(model, batch, lambda m, b: m(b.data, b.table), documents=[999])
    with pytest.raises(ValueError, match=r"an output of shape \[5\]: expected \[blocks, t_max"):
        bload.check_isolation(model, batch, lambda m, b: torch.zeros(5))
    with pytest.raises(TypeError, match="forward returned str: expected a tensor"):
        bload.check_isolation(model, batch, lambda m, b: "outputs")
    with pytest.raises(ValueError, match="batches: an empty list"):
        bload.check_isolation(model, [], lambda m, b: b)


def row_sum_leak(model, batch):
    """A leak: each step sees the sum of every earlier step of its row, other pieces included."""
    return model(batch.data).cumsum(1)


@pytest.mark.parametrize("padding", [float("nan"), float("-inf"), -1e9, -1.79e308])
def test_padding_outputs_neither_hide_a_leak_nor_set_the_scale(padding):
    found = [b for b in batches(Features(), count=10) if not bool(b.valid.all())]
    batch = with_two_pieces_in_a_row(found)  # and padding
    torch.manual_seed(4)
    model = torch.nn.Linear(FEATURES, 2, dtype=torch.float64)

    def padded(model, batch):  # padding logits masked, as a loss over the valid steps reads them
        return row_sum_leak(model, batch).masked_fill(~batch.valid.unsqueeze(-1), padding)

    expected = bload.check_isolation(model, batch, row_sum_leak, gradients=False)
    report = bload.check_isolation(model, batch, padded, gradients=False)
    assert not report.ok and report.largest == expected.largest > 1e-3
    # An isolated model with masked padding: still isolated, its largest change exactly 0.
    masked = bload.check_isolation(
        model,
        batch,
        lambda m, b: m(b.data).masked_fill(~b.valid.unsqueeze(-1), padding),
    )
    assert masked.ok and masked.largest == 0.0, masked


def test_a_document_output_that_is_not_finite_is_named_or_is_a_leak():
    batch = with_two_pieces_in_a_row(batches(Features(), count=10))
    sequence, row, start = (
        int(batch.table[0, COLUMN[name]]) for name in ("sequence", "block", "block_offset")
    )
    model = torch.nn.Linear(FEATURES, 2, dtype=torch.float64)

    def broken(model, batch):
        out = model(batch.data).clone()
        out[row, start, 1] = float("nan")
        return out

    with pytest.raises(
        ValueError,
        match=rf"baseline output is nan at sequence {sequence}'s step \(batch 0, row {row}, "
        rf"step {start}\): expected finite outputs",
    ):
        bload.check_isolation(model, batch, broken, gradients=False)

    def overflows(model, batch):  # a large input anywhere in the row: every step is inf
        out = model(batch.data)
        return torch.where(batch.data.abs().amax((1, 2), keepdim=True) > 10, float("inf"), out)

    report = bload.check_isolation(
        model, batch, overflows, gradients=False, perturb=lambda steps, _: steps * 100
    )
    assert not report.ok and report.largest == float("inf")
    assert "outputs changed by inf" in str(report)

    with pytest.raises(ValueError, match="gradients: the parameters' gradients of the documents'"):
        bload.check_isolation(model, batch, lambda m, b: (m(b.data) * 0).sqrt())


class TimeBatchNorm(torch.nn.Module):
    """Batch norm over blocks and steps: its statistics mix the documents in training only."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(5)
        self.input = torch.nn.Linear(FEATURES, HIDDEN, dtype=torch.float64)
        self.norm = torch.nn.BatchNorm1d(HIDDEN, dtype=torch.float64)

    def forward(self, batch):
        return self.norm(self.input(batch.data).transpose(1, 2)).transpose(1, 2)


def test_the_probe_leaves_the_models_buffers_and_mode_and_names_an_eval_mode_probe():
    batch = batches(Features())[0]
    model = TimeBatchNorm().train()
    model.input.eval()  # one module in another mode: each module's own mode is kept
    buffers = {name: tensor.clone() for name, tensor in model.named_buffers()}
    objects = {name: tensor for name, tensor in model.named_buffers()}
    parameters = {name: tensor.clone() for name, tensor in model.named_parameters()}
    report = bload.check_isolation(model, batch)
    assert not report.ok and report.training  # train mode: the statistics leak
    assert "eval mode" not in str(report)
    for name, tensor in model.named_buffers():
        assert tensor is objects[name] and torch.equal(tensor, buffers[name]), name
    for name, tensor in model.named_parameters():
        assert torch.equal(tensor, parameters[name]) and tensor.grad is None, name
    assert model.training and model.norm.training and not model.input.training

    model.eval()  # eval mode: the running statistics, nothing shared; the report says so
    report = bload.check_isolation(model, batch)
    assert report.ok and not report.training and not model.training
    assert "model in eval mode: leaks only training has" in str(report)
    for name, tensor in model.named_buffers():
        assert torch.equal(tensor, buffers[name]), name


def test_every_forward_starts_from_the_buffers_as_they_were():
    class Counting(torch.nn.Module):  # its output moves with a buffer each forward updates
        def __init__(self):
            super().__init__()
            self.register_buffer("calls", torch.zeros((), dtype=torch.float64))
            self.weight = torch.nn.Parameter(torch.ones(FEATURES, dtype=torch.float64))

        def forward(self, batch):
            self.calls += 1
            return batch.data * self.weight * self.calls

    model = Counting()
    report = bload.check_isolation(model, batches(Features())[0])
    assert report.ok and report.largest == 0.0, report
    assert float(model.calls) == 0.0


@pytest.mark.parametrize(
    "tolerance, error, message",
    [
        (-1, ValueError, "tolerance = -1: expected a finite number >= 0"),
        (float("nan"), ValueError, "tolerance = nan: expected a finite number >= 0"),
        (float("inf"), ValueError, "tolerance = inf: expected a finite number >= 0"),
        ("1e-6", TypeError, "tolerance = '1e-6': expected a number >= 0"),
        (None, TypeError, "tolerance = None: expected a number >= 0"),
    ],
)
def test_a_bad_tolerance_is_named(tolerance, error, message):
    with pytest.raises(error, match=message):
        bload.check_isolation(gru(), batches(Features())[0], tolerance=tolerance)
