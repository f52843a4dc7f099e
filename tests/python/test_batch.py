"""The packed batch made once: bload.PackedBatch has the core's fields; the ones written from the
table come from one operator (batch_tables, opcheck'ed) on first use, on the batch's device; a
batch crosses from a worker as data, target and table; the C++ buffer cache serves Python; a
loop left with `break` ends its workers at once; LaneState; and the messages users met."""

import gc
import os
import pickle
import time

import bload
import pytest
import torch
from test_package import Numbered, lengths_of

T_MAX = 30
PER_TABLE = {
    "reset": lambda table, blocks, carry: bload.ops.reset_mask(table, blocks, T_MAX, carry),
    "valid": lambda table, blocks, carry: bload.ops.valid_mask(table, blocks, T_MAX),
    "ends": lambda table, blocks, carry: bload.ops.end_mask(table, blocks, T_MAX),
    "carry": lambda table, blocks, carry: (
        bload.ops.carry_mask(table, blocks, T_MAX)
        if carry
        else torch.zeros(blocks, dtype=torch.bool)
    ),
    "segment_ids": lambda table, blocks, carry: bload.ops.segment_ids(table, blocks, T_MAX),
    "position_ids": lambda table, blocks, carry: bload.ops.position_ids(table, blocks, T_MAX),
    "cu_seqlens": lambda table, blocks, carry: bload.ops.cu_seqlens(table),
    "indices": lambda table, blocks, carry: table[:, bload.ops.COLUMN["sequence"]],
}


def batches(policy, workers=0, **loader):
    lengths = lengths_of(80, seed=4) + ([95] if policy == "lanes" else [])
    sampler = bload.BlockSampler(lengths, T_MAX, 3, world_size=2, rank=1, policy=policy)
    dataset = bload.BlockDataset(Numbered(lengths), T_MAX)
    return torch.utils.data.DataLoader(
        dataset, batch_sampler=sampler, collate_fn=bload.collate, num_workers=workers, **loader
    )


def test_the_batch_has_the_cores_fields_in_its_order():
    names, _, _, from_table, _ = torch.ops.bload.batch_fields()
    assert tuple(names) == tuple(bload.fields.BATCH_FIELDS)
    assert bload.fields.TABLE_FIELDS == tuple(name for name, made in zip(names, from_table) if made)
    batch = next(iter(batches("best_fit")))
    for name in names:
        kind = int if name in bload.fields.HOST_INTS else torch.Tensor
        assert isinstance(getattr(batch, name), kind), name
    assert "valid: bool [blocks, t_max], true on real steps" in bload.PackedBatch.__doc__


@pytest.mark.parametrize("policy", ["best_fit", "lanes"])
def test_every_table_field_is_what_its_own_operator_writes(policy):
    for batch in batches(policy):
        carry = batch.carries_state
        for name, made in PER_TABLE.items():
            assert torch.equal(getattr(batch, name), made(batch.table, batch.blocks, carry)), name
        assert batch.lanes.tolist() == [3, 4, 5]


def test_batch_tables_passes_opcheck():
    lengths = lengths_of(40, seed=1)
    sampler = bload.BlockSampler(lengths, T_MAX, 3, policy="lanes")
    for table in [sampler.plan.batch(0, 0), torch.empty(0, 6, dtype=torch.long)]:
        for carry in (False, True):
            torch.library.opcheck(torch.ops.bload.batch_tables.default, (table, 3, T_MAX, carry, 6))


def test_tables_cross_to_and_from_workers_in_the_pickle_not_in_shared_memory():
    # As a DataLoader's queues pickle them (ForkingPickler, with torch's reductions): a tensor
    # crosses as a shared memory segment, a descriptor asked of the sender over a socket; the
    # block tables, a few kilobytes, cross as bytes. Data and target still cross as tensors.
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # noqa: F401 (registers torch's reductions)

    sampler = bload.BlockSampler(lengths_of(40, seed=1), T_MAX, 3, read_ahead=2)
    request = next(iter(sampler))
    sent = bytes(ForkingPickler.dumps(request))
    assert b"rebuild_storage" not in sent
    again = pickle.loads(sent)
    assert again.table.dtype == torch.int64 and torch.equal(again.table, request.table)
    assert len(again.ahead) == len(request.ahead) == 2
    assert all(torch.equal(a, b) for a, b in zip(again.ahead, request.ahead))
    assert (again.index, again.global_batch) == (request.index, request.global_batch)
    empty = torch.empty(0, 6, dtype=torch.long)
    assert pickle.loads(pickle.dumps(bload.BlockBatch(empty, 3, T_MAX, 0, 0))).table.shape == (0, 6)

    batch = next(iter(batches("lanes")))
    sent = bytes(ForkingPickler.dumps(batch))
    assert b"rebuild_storage" in sent  # data and target; the table: the test below
    assert torch.equal(pickle.loads(sent).table, batch.table)


def test_a_batch_crosses_as_data_target_and_table_and_makes_its_tables_where_it_is_used():
    batch = next(iter(batches("lanes")))
    batch.valid  # noqa: B018 (made here: still not sent)
    sent = pickle.loads(pickle.dumps(batch))
    tensors = [arg for arg in batch.__reduce__()[1] if isinstance(arg, torch.Tensor)]
    # The table's bytes are in the pickle, not in a tensor of their own (below).
    assert [tensor.shape for tensor in tensors] == [batch.data.shape, batch.target.shape]
    assert sent.table.dtype == torch.int64 and torch.equal(sent.table, batch.table)
    assert sent._tables is None
    for name in bload.fields.TABLE_FIELDS:
        assert torch.equal(getattr(sent, name), getattr(batch, name)), name
    with_workers = list(batches("lanes", workers=2))
    alone = list(batches("lanes"))
    assert len(with_workers) == len(alone)
    for a, b in zip(with_workers, alone):
        assert a._tables is None and torch.equal(a.data, b.data) and torch.equal(a.reset, b.reset)
    moved = alone[0].to("cpu", non_blocking=True)
    assert moved.device == torch.device("cpu") and torch.equal(
        moved.position_ids, alone[0].position_ids
    )


def test_a_loader_without_bload_collate_says_what_to_pass():
    lengths = lengths_of(20)
    loader = torch.utils.data.DataLoader(
        bload.BlockDataset(Numbered(lengths), T_MAX),
        batch_sampler=bload.BlockSampler(lengths, T_MAX),
    )
    with pytest.raises(TypeError, match=r"pass collate_fn=bload\.collate to the DataLoader"):
        next(iter(loader))


def test_the_cpp_buffer_cache_reuses_a_tensor_only_once_nothing_holds_it():
    buffers = torch.classes.bload.PackBuffers()
    first = buffers.take([4, 8], torch.float32, False)
    address = first.data_ptr()
    held = buffers.take([4, 8], torch.float32, False)
    assert held.data_ptr() != address  # `first` is still held
    view = first[1]
    del first
    assert buffers.take([4, 8], torch.float32, False).data_ptr() not in (
        address,
        held.data_ptr(),
    )  # a view lives
    del view
    assert buffers.take([4, 8], torch.float32, False).data_ptr() == address
    shared = buffers.take([2, 3], torch.int64, True)
    assert shared.is_shared() and shared.shape == (2, 3) and shared.dtype == torch.int64


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_loop_left_with_break_ends_its_workers_at_once():
    loader = batches("best_fit", workers=2)
    iterator = iter(loader)
    next(iterator)
    pids = [worker.pid for worker in iterator._workers]
    gc.disable()
    try:
        del iterator, loader
        deadline = time.monotonic() + 2
        while any(map(alive, pids)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(map(alive, pids)), "workers alive 2 s after the loader was dropped"
    finally:
        gc.enable()


@pytest.mark.parametrize(
    "arguments, error, expected",
    [
        ({"t_max": 0}, ValueError, "t_max = 0: expected an int from 1 to 16777216"),
        ({"t_max": 2**40}, ValueError, f"t_max = {2**40}: expected an int from 1 to 16777216"),
        (
            {"blocks_per_batch": 0},
            ValueError,
            "blocks_per_batch = 0: expected an int from 1 to 4294967295",
        ),
        ({"seed": -1}, ValueError, "seed = -1: expected an int from 0 to 9223372036854775807"),
        ({"split": "False"}, TypeError, "split = 'False': expected True"),
        (
            {"policy": "bfd"},
            ValueError,
            "policy = 'bfd': expected one of best_fit, random_fill, pad_to_max, lanes",
        ),
        (
            {"lengths": [3.0, 4.5]},
            TypeError,
            "lengths[0] = 3.0: expected an int",
        ),
    ],
)
def test_bad_arguments_name_the_real_bounds(arguments, error, expected):
    made = {"lengths": [3, 4, 5], "t_max": 8, **arguments}
    with pytest.raises(error) as raised:
        bload.BlockSampler(made.pop("lengths"), made.pop("t_max"), **made)
    assert expected in str(raised.value)
    assert bload.POLICIES == ("best_fit", "random_fill", "pad_to_max", "lanes")


def lanes_sampler(world_size, rank, rows):
    return bload.BlockSampler(
        lengths_of(60, seed=2) + [200],
        T_MAX,
        rows,
        world_size=world_size,
        rank=rank,
        policy="lanes",
    )


def test_lane_state_carries_each_lanes_state_and_resumes_in_other_factors():
    states = []
    for rank in range(2):
        sampler = lanes_sampler(2, rank, 2)
        lanes = bload.LaneState(sampler, (3,))
        dataset = bload.BlockDataset(Numbered(lengths_of(60, seed=2) + [200]), T_MAX)
        batch = dataset.__getitems__(next(iter(sampler)))
        assert torch.equal(lanes.initial(batch), torch.zeros(2, 3))
        final = torch.arange(6.0).view(2, 3) + 10 * rank
        lanes.update(batch, final.requires_grad_())
        assert not lanes.state.requires_grad
        batch = dataset.__getitems__(next(iter(sampler)))
        expected = torch.where(batch.carry.view(2, 1), final.detach(), torch.zeros(()))
        assert torch.equal(lanes.initial(batch), expected)
        states.append(lanes.state)
    every = {"lanes": 4, "state": torch.cat(states)}  # what state_dict() gathers on 2 ranks
    one = bload.LaneState(lanes_sampler(1, 0, 4), (3,))
    one.load_state_dict(every)
    assert torch.equal(one.state, torch.cat(states))
    saved = one.state_dict()
    assert saved["lanes"] == 4 and torch.equal(saved["state"], one.state)
    with pytest.raises(
        ValueError, match=r"state\['lanes'\] = 4: expected 3 \(world_size \* blocks_per_batch\)"
    ):
        bload.LaneState(lanes_sampler(1, 0, 3), (3,)).load_state_dict(every)
    with pytest.raises(
        ValueError, match=r"state\['state'\] is \[4, 3\]: expected a tensor \[4, 5\]"
    ):
        bload.LaneState(lanes_sampler(1, 0, 4), (5,)).load_state_dict(every)
    with pytest.raises(
        ValueError,
        match="a batch of lanes 2 to 3: expected a lanes batch of this rank's lanes 0 to 1",
    ):
        bload.LaneState(lanes_sampler(2, 0, 2), (3,)).initial(batch)
