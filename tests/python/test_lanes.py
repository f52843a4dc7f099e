"""The lanes policy end to end in Python: BlockSampler(policy="lanes") and BlockDataset batches,
run by a GRU that carries each row's state from batch to batch, give every step the output it gets
when its sequence runs whole on its own; with the state detached at batch boundaries, a batch's
gradients are the per-sequence gradients truncated at the same boundaries; and no sequence's
outputs depend on another's steps, for packed and lane batches, in bload.nn.PackedGRU."""

import bload
import pytest
import torch
from conftest import COLUMN

FEATURES, HIDDEN = 3, 5
# Sequences up to 11 times t_max, and many shorter than it.
LENGTHS = [2, 95, 7, 1, 30, 12, 9, 64, 3, 17, 8, 5, 41, 6, 26, 4]
T_MAX = 9


class Sequences(torch.utils.data.Dataset):
    """Random features per sequence (seeded), with get_range: windows read only their steps."""

    def __init__(self, lengths, seed=0):
        generator = torch.Generator().manual_seed(seed)
        self.items = [
            torch.randn(length, FEATURES, generator=generator, dtype=torch.float64)
            for length in lengths
        ]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index], torch.zeros(len(self.items[index]))

    def get_range(self, index, offset, length):
        return self.items[index][offset : offset + length], torch.zeros(length)


def lane_batches(dataset, world_size=1, rank=0, blocks_per_batch=3, seed=0, epoch=0):
    sampler = bload.BlockSampler(
        LENGTHS,
        T_MAX,
        blocks_per_batch,
        world_size=world_size,
        rank=rank,
        seed=seed,
        policy="lanes",
    )
    sampler.set_epoch(epoch)
    loader = torch.utils.data.DataLoader(
        bload.BlockDataset(dataset, T_MAX), batch_sampler=sampler, collate_fn=bload.collate
    )
    return list(loader)


def step(cell, batch, state):
    """One lane batch through `cell`: -> outputs [blocks, t_max, hidden], final state."""
    keep = batch.reset.logical_not().to(state.dtype)
    state = state * batch.carry.to(state.dtype).unsqueeze(1)
    outputs = []
    for t in range(batch.data.size(1)):
        state = cell(batch.data[:, t], state * keep[:, t].unsqueeze(1))
        outputs.append(state)
    return torch.stack(outputs, 1), state


def whole(cell, sequence, state=None):
    """The sequence [T, features] run on its own: -> outputs [T, hidden]."""
    state = torch.zeros(1, HIDDEN, dtype=sequence.dtype) if state is None else state
    outputs = []
    for t in range(sequence.size(0)):
        state = cell(sequence[t : t + 1], state)
        outputs.append(state[0])
    return torch.stack(outputs)


def pieces(batch):
    column = bload.ops.COLUMN
    for row in batch.table.tolist():
        yield (
            row[column["block"]],
            row[column["block_offset"]],
            row[column["length"]],
            row[column["sequence"]],
            row[column["offset"]],
        )


@pytest.mark.parametrize("world_size", [1, 2])
def test_carried_state_gives_every_step_its_whole_sequence_output(world_size):
    torch.manual_seed(0)
    cell = torch.nn.GRUCell(FEATURES, HIDDEN).double()
    dataset = Sequences(LENGTHS)
    expected = [whole(cell, item) for item in dataset.items]
    served = [torch.zeros(length, dtype=torch.bool) for length in LENGTHS]
    with torch.no_grad():
        for rank in range(world_size):
            batches = lane_batches(dataset, world_size, rank)
            state = torch.zeros(3, HIDDEN, dtype=torch.float64)
            for batch in batches:
                assert batch.lanes.tolist() == [rank * 3 + j for j in range(3)]
                outputs, state = step(cell, batch, state)
                for block, start, length, sequence, offset in pieces(batch):
                    got = outputs[block, start : start + length]
                    torch.testing.assert_close(
                        got, expected[sequence][offset : offset + length], atol=1e-5, rtol=0
                    )
                    served[sequence][offset : offset + length] = True
                    if offset > 0:
                        assert start == 0 and batch.carry[block] and not batch.reset[block, 0]
                    else:
                        assert batch.reset[block, start]
                    assert batch.ends[block, start + length - 1] == (
                        offset + length == LENGTHS[sequence]
                    )
    assert all(mask.all() for mask in served)


def test_detached_state_gives_each_batch_the_truncated_per_sequence_gradients():
    torch.manual_seed(1)
    cell = torch.nn.GRUCell(FEATURES, HIDDEN).double()
    dataset = Sequences(LENGTHS, seed=1)
    weights = torch.randn(HIDDEN, dtype=torch.float64)
    with torch.no_grad():
        full = [whole(cell, item) for item in dataset.items]
    state = torch.zeros(3, HIDDEN, dtype=torch.float64)
    for batch in lane_batches(dataset):
        outputs, final = step(cell, batch, state.detach())
        loss = (outputs @ weights)[batch.valid].sum()
        got = torch.autograd.grad(loss, list(cell.parameters()))
        # Each piece on its own from the (detached) state its sequence had where the piece starts.
        reference = 0
        for _, _, length, sequence, offset in pieces(batch):
            start = full[sequence][offset - 1 : offset] if offset > 0 else None
            steps = dataset.items[sequence][offset : offset + length]
            reference = reference + (whole(cell, steps, start) @ weights).sum()
        expected = torch.autograd.grad(reference, list(cell.parameters()))
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e, atol=1e-9, rtol=1e-7)
        state = final


def assert_no_leaks(run, batch, dataset_items, changed):
    """Changes the last step of sequence `changed` in `batch` and checks that no step of any other
    sequence has another output: `run(data)` gives the batch's per-step outputs."""
    before = run(batch.data)
    data, touched = batch.data.clone(), False
    for block, start, length, sequence, offset in pieces(batch):
        if sequence == changed and offset + length == len(dataset_items[sequence]):
            data[block, start + length - 1] += 10.0
            touched = True
    after = run(data)
    others = batch.valid.clone()  # padding steps belong to no sequence
    for block, start, length, sequence, _ in pieces(batch):
        if sequence == changed:
            others[block, start : start + length] = False
    assert torch.equal(before[others], after[others]), "another sequence's outputs changed"
    # ... and the changed step's own output does change (the check could fail).
    assert (before != after).any().item() == touched


@pytest.mark.parametrize("policy", ["best_fit", "lanes"])
def test_the_library_model_leaks_nothing_across_sequences(policy):
    torch.manual_seed(2)
    model = bload.nn.PackedGRU(FEATURES, HIDDEN, 2).double()
    lengths = [5, 3, 8, 2, 7, 4, 6, 1, 9, 3]
    dataset = Sequences(lengths, seed=2)
    sampler = bload.BlockSampler(lengths, 9, 2, policy=policy, split=True)
    loader = torch.utils.data.DataLoader(
        bload.BlockDataset(dataset, 9), batch_sampler=sampler, collate_fn=bload.collate
    )
    state = torch.zeros(2, HIDDEN, dtype=torch.float64)
    for batch in loader:
        if policy == "lanes":
            run = lambda data: model.forward_lanes(data, batch.table, batch.carry, state)[0]  # noqa: E731, B023
        else:
            run = lambda data: model(data, batch.table)  # noqa: E731, B023
        for sequence in batch.indices.unique().tolist():
            assert_no_leaks(run, batch, dataset.items, sequence)
        if policy == "lanes":
            state = model.forward_lanes(batch.data, batch.table, batch.carry, state)[1].detach()


def test_the_scripted_model_runs_lanes_like_the_eager_one():
    eager = bload.nn.PackedGRU(FEATURES, HIDDEN, 1).double()
    scripted = torch.jit.script(eager)
    dataset = Sequences(LENGTHS)
    state_e = state_s = torch.zeros(3, HIDDEN, dtype=torch.float64)
    for batch in lane_batches(dataset):
        out_e, state_e = eager.forward_lanes(batch.data, batch.table, batch.carry, state_e)
        out_s, state_s = scripted.forward_lanes(batch.data, batch.table, batch.carry, state_s)
        torch.testing.assert_close(out_e, out_s)
        torch.testing.assert_close(state_e, state_s)


def test_a_table_that_continues_a_sequence_inside_a_row_is_refused_with_carry():
    column = bload.ops.COLUMN
    table = torch.zeros(2, len(column), dtype=torch.long)
    table[0, [column["length"], column["sequence_length"]]] = torch.tensor([2, 2])
    table[
        1,
        [
            column["block_offset"],
            column["length"],
            column["sequence"],
            column["offset"],
            column["sequence_length"],
        ],
    ] = torch.tensor([2, 3, 1, 4, 7])
    assert bload.ops.reset_mask(table, 1, 8)[0, 2].item() is not False
    with pytest.raises(
        RuntimeError,
        match=r"table\[1, offset\] = 4: expected 0 where the piece does not open its block",
    ):
        bload.ops.reset_mask(table, 1, 8, carry=True)
    with pytest.raises(RuntimeError, match=r"table\[1, offset\]"):
        bload.ops.carry_mask(table, 1, 8)
    assert bload.ops.end_mask(table, 1, 8).nonzero().tolist() == [[0, 1], [0, 4]]


def test_lanes_resume_with_their_lane_count_in_other_factors_and_refuse_another_count():
    # 2 ranks of 2 lanes, saved after 2 batches; 1 rank of 4 lanes goes on with the same lanes.
    saved = [
        bload.BlockSampler(LENGTHS, T_MAX, 2, world_size=2, rank=rank, policy="lanes")
        for rank in range(2)
    ]
    for sampler in saved:
        batches = iter(sampler)
        next(batches), next(batches)
    state = saved[0].state_dict()
    assert (state["position"], state["world_size"], state["blocks_per_batch"]) == (2, 2, 2)
    one = bload.BlockSampler(LENGTHS, T_MAX, 4, world_size=1, rank=0, policy="lanes")
    one.load_state_dict(state)
    rest = list(one)
    assert len(rest) == saved[0].plan.batches_per_rank() - 2 > 0
    for index, batch in enumerate(rest, start=2):
        halves = [saved[rank].plan.batch(rank, index).clone() for rank in range(2)]
        halves[1][:, COLUMN["block"]] += 2  # rank 1's rows are rows 2 and 3 of the one rank
        assert torch.equal(batch.table, torch.cat(halves)), index
    other = bload.BlockSampler(LENGTHS, T_MAX, 2, world_size=1, rank=0, policy="lanes")
    with pytest.raises(
        RuntimeError, match=r"world_size \* blocks_per_batch = 1 \* 2 = 2: expected 4 .*lane count"
    ):
        other.load_state_dict(state)


def test_a_lane_state_of_a_sampler_that_carries_no_state_is_refused_at_once():
    # Was made, and then refused every batch in initial() and update(), far from the cause.
    sampler = bload.BlockSampler(LENGTHS, T_MAX, 2, split=True)
    with pytest.raises(ValueError, match="sampler = a BlockSampler of policy 'best_fit': expected"):
        bload.LaneState(sampler, (HIDDEN,))
    lanes = bload.BlockSampler(LENGTHS, T_MAX, 2, policy="lanes")
    assert bload.LaneState(lanes, (HIDDEN,)).state.shape == (2, HIDDEN)
