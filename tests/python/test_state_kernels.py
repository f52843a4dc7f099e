"""state_in and state_out, the lanes policy's carried state per piece: their values on a table
worked out by hand, LaneState's per-piece gather and scatter, and examples/state_kernel.py's
chunked recurrence over cu_seqlens equal over whole lanes epochs (1 and 2 ranks) to every
sequence run whole, at 1e-10 in float64."""

import bload
import pytest
import torch
from ddp_support import example_module

example = example_module("state_kernel")

# A lanes batch of 4 rows of 4 steps (rank 0 of 1, 4 rows):
# row 0: steps 2..5 of sequence 0 (9 steps): continued from the previous batch, cut at the end;
# row 1: step 3 of sequence 1 (4 steps), continued, ending mid-row; then sequence 2 whole (3
#        steps), ending exactly at the row's end;
# row 2: padding only;
# row 3: sequence 3 whole (2 steps), then steps 0..1 of sequence 4 (5 steps), cut at the end.
LANES = torch.tensor(
    [
        # block, block_offset, length, sequence, offset, sequence_length
        [0, 0, 4, 0, 2, 9],
        [1, 0, 1, 1, 3, 4],
        [1, 1, 3, 2, 0, 3],
        [3, 0, 2, 3, 0, 2],
        [3, 2, 2, 4, 0, 5],
    ]
)
LANE_LENGTHS = [9, 4, 3, 2, 5]


def test_state_in_and_state_out_by_hand():
    tables = bload.ops.batch_tables(LANES, 4, 4, True, 0)
    assert tables["cu_seqlens"].tolist() == [0, 4, 5, 8, 10, 12]
    # The two continued pieces start from their rows' lane states; the others from zeros.
    assert tables["state_in"].dtype == torch.int64
    assert tables["state_in"].tolist() == [0, 1, -1, -1, -1]
    # Row 0's piece (which also read the state) and row 3's last piece go on next batch; row 1's
    # sequence ends exactly at the row's end and row 2 is padding: nothing reads their lanes again.
    assert tables["state_out"].dtype == torch.int64
    assert tables["state_out"].tolist() == [0, -1, -1, 4]
    packed = bload.ops.batch_tables(LANES, 4, 4, False, 0)  # no carried state: nothing carries
    assert packed["state_in"].tolist() == [-1] * 5 and packed["state_out"].tolist() == [-1] * 4
    empty = bload.ops.batch_tables(torch.empty(0, 6, dtype=torch.long), 2, 4, True, 0)
    assert empty["state_in"].shape == (0,) and empty["state_out"].tolist() == [-1, -1]


def test_the_fields_are_the_batchs_with_their_shapes_and_docs():
    assert bload.fields.BATCH_FIELDS["state_in"][:2] == ("int64", "[pieces]")
    assert bload.fields.BATCH_FIELDS["state_out"][:2] == ("int64", "[blocks]")
    assert (
        "state_in: int64 [pieces], for every piece, in cu_seqlens order"
        in bload.PackedBatch.__doc__
    )
    # The meta kernel (torch.compile's fake tensors) gives state_in the table's (ragged) row count.
    made = torch.ops.bload.batch_tables(LANES.to("meta"), 4, 4, True, 0)
    names = bload.fields.TABLE_FIELDS
    state_in, state_out = made[names.index("state_in")], made[names.index("state_out")]
    assert state_in.shape == (5,) and state_out.shape == (4,) and state_out.dtype == torch.int64


def lane_state_of(rows, world_size=1, rank=0):
    sampler = bload.BlockSampler(
        LANE_LENGTHS, 4, rows, world_size=world_size, rank=rank, policy="lanes"
    )
    return bload.LaneState(sampler, (2,), dtype=torch.float64)


def test_lane_state_gathers_by_state_in_and_scatters_by_state_out():
    lanes = lane_state_of(4)
    lanes.state = torch.arange(8, dtype=torch.float64).view(4, 2) + 1
    batch = bload.PackedBatch(torch.zeros(4, 4), torch.zeros(4, 4), LANES, 4, 4, carries_state=True)
    initial = lanes.initial_pieces(batch)
    assert initial.tolist() == [[1, 2], [3, 4], [0, 0], [0, 0], [0, 0]]
    final = -torch.arange(10, dtype=torch.float64).view(5, 2).requires_grad_()
    lanes.update_pieces(batch, final)
    # Row 0 takes piece 0's final state, row 3 piece 4's; rows 1 and 2 keep theirs.
    assert (
        lanes.state.tolist() == [[0, -1], [3, 4], [5, 6], [-8, -9]]
        and not lanes.state.requires_grad
    )
    with pytest.raises(
        ValueError, match=r"final_states has shape \[4, 2\]: expected \[5, 2\], a state per piece"
    ):
        lanes.update_pieces(batch, final[:4])
    padding = bload.PackedBatch(
        torch.zeros(4, 4), torch.zeros(4, 4), LANES[:0], 4, 4, carries_state=True
    )
    assert lanes.initial_pieces(padding).shape == (0, 2)
    lanes.update_pieces(padding, torch.zeros(0, 2, dtype=torch.float64))
    assert lanes.state.tolist() == [[0, -1], [3, 4], [5, 6], [-8, -9]]
    with pytest.raises(ValueError, match="expected a lanes batch of this rank's lanes 0 to 1"):
        lane_state_of(2, world_size=2).initial_pieces(batch)


def whole_sequence(a, u):
    """h_t = a_t * h_{t-1} + u_t step by step from zero: the reference."""
    h, out = torch.zeros(a.size(-1), dtype=a.dtype), []
    for t in range(len(a)):
        h = a[t] * h + u[t]
        out.append(h)
    return torch.stack(out)


def lengths_of(count, longest, seed):
    return torch.randint(
        1, longest + 1, (count,), generator=torch.Generator().manual_seed(seed)
    ).tolist()


def gates(model, x):
    return torch.sigmoid(model.gate(x)), model.input(x)


@pytest.mark.parametrize("world_size, by", [(1, "lane_state"), (1, "fields"), (2, "lane_state")])
def test_a_chunked_recurrence_over_a_lanes_epoch_equals_every_sequence_run_whole(world_size, by):
    t_max, rows = 16, 3
    lengths = lengths_of(40, 70, seed=world_size) + [5 * t_max + 3]  # some many times t_max
    dataset = example.Clips(lengths)
    torch.manual_seed(0)
    model = example.GatedRecurrence()
    steps = {
        index: torch.full((length, example.HIDDEN), float("nan"), dtype=torch.float64)
        for index, length in enumerate(lengths)
    }
    carried = 0  # pieces that start from a lane's state
    with torch.no_grad():
        for rank in range(world_size):  # each rank's loop, one after the other
            sampler = bload.BlockSampler(
                lengths, t_max, rows, world_size=world_size, rank=rank, policy="lanes", seed=3
            )
            loader = torch.utils.data.DataLoader(
                bload.BlockDataset(dataset, t_max), batch_sampler=sampler, collate_fn=bload.collate
            )
            lanes = bload.LaneState(sampler, (example.HIDDEN,), dtype=torch.float64)
            for batch in loader:
                a, u = gates(model, batch.data[batch.valid])
                carried += int((batch.state_in >= 0).sum())
                if by == "lane_state":
                    initial = lanes.initial_pieces(batch)
                else:  # the fields alone: gather by state_in, scatter by state_out
                    initial = lanes.state[batch.state_in.clamp(min=0)] * (
                        batch.state_in >= 0
                    ).unsqueeze(1)
                h, final = example.chunked_linear_recurrence(
                    a, u, batch.cu_seqlens, initial, chunk=5
                )
                if by == "lane_state":
                    lanes.update_pieces(batch, final)
                else:
                    kept = batch.state_out >= 0
                    lanes.state[kept] = final[batch.state_out[kept]]
                bounds = batch.cu_seqlens.tolist()
                for piece, row in enumerate(batch.table.tolist()):
                    sequence, offset, length = row[3], row[4], row[2]
                    steps[sequence][offset : offset + length] = h[bounds[piece] : bounds[piece + 1]]
                    assert torch.equal(final[piece], h[bounds[piece + 1] - 1])
    assert carried >= len(lengths) // 2  # split again and again, not only at one boundary
    for index, length in enumerate(lengths):
        x, _ = dataset[index]
        reference = whole_sequence(*gates(model, x))
        torch.testing.assert_close(
            steps[index], reference, rtol=0, atol=1e-10, msg=f"sequence {index} ({length} steps)"
        )


def test_other_policies_carry_nothing():
    lengths = lengths_of(30, 40, seed=5)
    sampler = bload.BlockSampler(lengths, 16, 2, policy="best_fit", split=True)
    loader = torch.utils.data.DataLoader(
        bload.BlockDataset(example.Clips(lengths), 16),
        batch_sampler=sampler,
        collate_fn=bload.collate,
    )
    split = 0
    for batch in loader:
        split += int((batch.table[:, bload.ops.COLUMN["offset"]] > 0).sum())
        assert bool((batch.state_in == -1).all()) and bool((batch.state_out == -1).all())
        assert batch.state_in.shape == (len(batch.table),) and batch.state_out.shape == (2,)
    assert split > 0  # split pieces, and still nothing carried: each starts from zeros
