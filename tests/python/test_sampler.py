"""bload.BlockSampler's state saved and restored, onto another world size too, and the
DataLoader misuse it refuses."""

import traceback
import warnings
from typing import Dict

import bload
import pytest
import torch
from conftest import COLUMN

Planner = torch.classes.bload.Planner
T_MAX, BLOCKS = 94, 2


class Clips(torch.utils.data.Dataset):
    """Variable-length sequences: features [T_i, 16] and a label per step [T_i]."""

    def __init__(self, lengths):
        self.lengths = lengths

    def __len__(self):
        return len(self.lengths)

    def __getitem__(self, index):
        steps = self.lengths[index]
        return torch.randn(steps, 16), torch.randint(0, 10, (steps,))


def planner_for(lengths, world_size):
    return Planner(
        torch.tensor(lengths), T_MAX, blocks_per_batch=BLOCKS, world_size=world_size, seed=3
    )


def sampler_for(lengths, world_size, rank):
    return bload.BlockSampler(lengths, T_MAX, BLOCKS, world_size=world_size, rank=rank, seed=3)


def tables_through_loader(lengths, sampler, workers=0):
    loader = torch.utils.data.DataLoader(
        bload.BlockDataset(Clips(lengths), T_MAX),
        batch_sampler=sampler,
        collate_fn=bload.collate,
        num_workers=workers,
    )
    return [batch.table for batch in loader]


def served_from(sampler, batches):
    """The next `batches` block tables of the sampler, taken from it directly (no DataLoader)."""
    iterator = iter(sampler)
    return [next(iterator).table for _ in range(batches)]


def assert_every_step_once(lengths, tables):
    pieces = {}
    for table in tables:
        for row in table.tolist():
            pieces.setdefault(row[COLUMN["sequence"]], []).append(
                (row[COLUMN["offset"]], row[COLUMN["length"]])
            )
    assert sorted(pieces) == list(range(len(lengths)))
    for sequence, own in pieces.items():
        covered = 0
        for offset, length in sorted(own):
            assert offset == covered, f"sequence {sequence}: gap or overlap"
            covered += length
        assert covered == lengths[sequence]


@pytest.mark.parametrize("workers", [0, 2])
def test_resumed_on_two_ranks_the_rest_of_an_epoch_on_three_is_served_once(
    action_genome_lengths, workers
):
    lengths = action_genome_lengths
    served, states = [], []
    for rank in range(3):
        sampler = sampler_for(lengths, 3, rank)
        sampler.set_epoch(1)
        served += served_from(sampler, 40)
        states.append(sampler.state_dict())
    # The state is the epoch's, not the rank's: every rank saves the same.
    assert states == [states[0]] * 3
    place = (
        "epoch",
        "position",
        "world_size",
        "blocks_per_batch",
        "planned_world_size",
        "first_block",
    )
    assert {name: states[0][name] for name in place} == {
        "epoch": 1,
        "position": 40,
        "world_size": 3,
        "blocks_per_batch": BLOCKS,
        "planned_world_size": 3,
        "first_block": 0,
    }

    two = planner_for(lengths, 2)
    rest = []
    for rank in range(2):
        sampler = sampler_for(lengths, 2, rank)
        sampler.load_state_dict(states[0])
        sampler.set_epoch(1)  # as a trainer's epoch loop does: the epoch goes on where it was
        expected_batches = len(sampler)
        rest.append(tables_through_loader(lengths, sampler, workers))
        assert len(rest[-1]) == expected_batches > 0
        # Later epochs are planned for 2 ranks.
        sampler.set_epoch(2)
        epoch2 = [two.batch(2, rank, index) for index in range(two.batches_per_rank(2))]
        got = tables_through_loader(lengths, sampler)
        assert len(got) == len(epoch2) and all(map(torch.equal, got, epoch2))
    assert len(rest[0]) == len(rest[1])
    assert_every_step_once(lengths, served + rest[0] + rest[1])


def test_a_resumed_epoch_resumed_again_on_three_ranks_is_served_once(action_genome_lengths):
    lengths = action_genome_lengths
    served = []
    for rank in range(3):
        first = sampler_for(lengths, 3, rank)
        served += served_from(first, 25)
    state = first.state_dict()
    for rank in range(2):
        second = sampler_for(lengths, 2, rank)
        second.load_state_dict(state)
        served += served_from(second, 10)
    again = second.state_dict()
    assert (again["planned_world_size"], again["first_block"], again["world_size"]) == (
        3,
        25 * 3 * BLOCKS,
        2,
    )
    counts = []
    for rank in range(3):
        last = sampler_for(lengths, 3, rank)
        last.load_state_dict(again)
        counts.append(len(last))
        served += [batch.table for batch in last]
    assert counts == [counts[0]] * 3
    assert_every_step_once(lengths, served)


def test_the_same_world_size_resumes_at_the_next_batch(action_genome_lengths):
    planner = planner_for(action_genome_lengths, 2)
    original = sampler_for(action_genome_lengths, 2, 1)
    original.set_epoch(4)
    batches = iter(original)
    for _ in range(5):
        next(batches)
    resumed = sampler_for(action_genome_lengths, 2, 1)
    resumed.load_state_dict(original.state_dict())
    assert resumed.state_dict() == original.state_dict()
    assert len(resumed) == planner.batches_per_rank(4)  # the epoch's, not the rest's
    rest, expected = [b.table for b in resumed], [b.table for b in batches]
    assert len(rest) == len(expected) == planner.batches_per_rank(4) - 5
    assert all(map(torch.equal, rest, expected))
    # An epoch served to its end is served again, whole, by the next iteration.
    assert len(resumed) == planner.batches_per_rank(4)
    assert len(list(resumed)) == planner.batches_per_rank(4)


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"batches": 10**6}, "state['position'] = 1000000: expected from 0 to "),
        (
            {"planned_world_size": 100000},
            "planned_world_size * blocks_per_batch = 200000 (100000 x 2): expected at most 7464",
        ),
        ({"first_block": 10**6}, "state['first_block'] = 1000000: expected from 0 to "),
    ],
)
def test_a_whole_state_of_a_place_outside_the_epoch_names_the_field_and_its_bounds(
    action_genome_lengths, change, expected
):
    planner = planner_for(action_genome_lengths, 2)
    sampler = sampler_for(action_genome_lengths, 2, 0)
    # A state as a sampler would save it there (its checksum right), for a place no epoch has.
    state = dict(sampler.planner.sampler_state(sampler.plan.position(0) | change, 1))
    with pytest.raises(RuntimeError) as error:
        sampler.load_state_dict(state)
    assert expected in str(error.value)
    with pytest.raises(RuntimeError, match=r"position\['rank'\]: expected a dict of epoch"):
        planner.resume(planner.plan(0).position(0) | {"rank": 1})


@pytest.mark.parametrize(
    "field",
    [
        "epoch",
        "position",
        "seed",
        "t_max",
        "policy",
        "split_oversized",
        "lengths_hash",
        "first_block",
    ],
)
def test_a_changed_value_is_caught_by_the_checksum(action_genome_lengths, field):
    sampler = sampler_for(action_genome_lengths, 2, 0)
    served_from(sampler, 3)
    state = sampler.state_dict()
    value = state[field]
    state[field] = (
        (not value)
        if isinstance(value, bool)
        else value + "x"
        if isinstance(value, str)
        else value + 1
    )
    before = sampler.state_dict()
    with pytest.raises(
        RuntimeError,
        match=r"state\['checksum'\] = -?\d+: expected -?\d+, the checksum of the values the state holds: the state is corrupted",
    ):
        sampler.load_state_dict(state)
    assert sampler.state_dict() == before


@pytest.mark.parametrize(
    "state, error, expected",
    [
        (None, TypeError, "state: expected the dict state_dict() returns, got NoneType"),
        (
            {},
            ValueError,
            "state: no epoch, position, world_size: expected the dict state_dict() returns",
        ),
        ({"epoch": 0, "world_size": 2}, ValueError, "state: no position"),
        (
            {"epoch": "3", "position": 0, "world_size": 2},
            TypeError,
            "state['epoch'] = '3': expected an int",
        ),
        (
            {"epoch": True, "position": 0, "world_size": 2},
            TypeError,
            "state['epoch'] = True: expected an int",
        ),
        (
            {"epoch": 0, "position": 2**64, "world_size": 2},
            ValueError,
            f"state['position'] = {2**64}: expected an int from",
        ),
    ],
)
def test_a_malformed_state_of_bload_0_1_names_what_is_wrong_and_changes_nothing(
    action_genome_lengths, state, error, expected
):
    # States without a version are bload 0.1's (the position alone): read with a warning.
    sampler = sampler_for(action_genome_lengths, 2, 0)
    before = sampler.state_dict()
    with pytest.raises(error) as raised, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sampler.load_state_dict(state)
    assert expected in str(raised.value)
    assert sampler.state_dict() == before


@pytest.mark.parametrize(
    "epoch, error", [(2**63, ValueError), (-1, ValueError), (1.0, TypeError), (True, TypeError)]
)
def test_set_epoch_names_a_bad_epoch(action_genome_lengths, epoch, error):
    sampler = sampler_for(action_genome_lengths, 2, 0)
    with pytest.raises(error, match=f"epoch = {epoch!r}: expected an int"):
        sampler.set_epoch(epoch)


@pytest.mark.parametrize("workers", [0, 2])
def test_the_sampler_passed_as_sampler_with_a_batch_size_is_an_error(
    action_genome_lengths, workers
):
    sampler = sampler_for(action_genome_lengths, 1, 0)
    loader = torch.utils.data.DataLoader(
        bload.BlockDataset(Clips(action_genome_lengths), T_MAX),
        sampler=sampler,
        batch_size=8,
        drop_last=True,
        collate_fn=bload.collate,
        num_workers=workers,
    )
    batches = iter(loader)
    with pytest.raises(
        TypeError,
        match=r"expected a BlockBatch from bload.BlockSampler, passed to the DataLoader as batch_sampler= \(not sampler=\)",
    ) as raised:
        next(batches)
    # Its workers stop here, while their queues are open: the traceback's frames hold the
    # iterator, which freed with them by a later garbage collection (in another test) waited 5 s
    # on each worker.
    traceback.clear_frames(raised.tb)
    del batches
    plain = torch.utils.data.DataLoader(
        Clips(action_genome_lengths), batch_sampler=sampler_for(action_genome_lengths, 1, 0)
    )
    with pytest.raises(TypeError, match="wrap the dataset in bload.BlockDataset"):
        next(iter(plain))


@torch.jit.script
def batches_left(planner: torch.classes.bload.Planner, position: Dict[str, int]) -> int:
    plan, served = planner.resume(position)
    return plan.batches_per_rank() - served


def test_resume_runs_in_torchscript(action_genome_lengths):
    three, two = planner_for(action_genome_lengths, 3), planner_for(action_genome_lengths, 2)
    position = three.plan(0).position(5)
    assert batches_left(three, position) == three.batches_per_rank(0) - 5
    rest = two.resume(position)[0]
    assert batches_left(two, position) == rest.batches_per_rank() > 0
    # The blocks left, on 2 ranks of 2 blocks, padded by fewer than 4 empty blocks, all counted.
    added = rest.stats()["blocks"] - three.stats(0)["blocks"]
    assert 0 <= added < 4 and rest.stats()["empty_blocks"] >= added
    assert rest.stats()["padding"] == three.stats(0)["padding"] + added * T_MAX


class Listed(torch.utils.data.Dataset):
    """A user's dataset over a list, as most are: its list takes an int index alone."""

    def __init__(self, lengths):
        self.items = [(torch.zeros(n, 2), torch.zeros(n, dtype=torch.long)) for n in lengths]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]


@pytest.mark.parametrize("batch_size", [1, None])
def test_the_sampler_passed_as_sampler_to_a_users_dataset_says_to_pass_batch_sampler(
    action_genome_lengths, batch_size
):
    lengths = action_genome_lengths[:50]
    loader = torch.utils.data.DataLoader(
        Listed(lengths), sampler=sampler_for(lengths, 1, 0), batch_size=batch_size
    )
    with pytest.raises(TypeError, match=r"as batch_sampler= \(not sampler=\).*bload.collate"):
        next(iter(loader))
