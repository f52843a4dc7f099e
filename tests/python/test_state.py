"""A sampler's saved state, bload's one checkpoint format: it carries what the plan depends on
and a checksum, so a state of other lengths or options, or a damaged one (a pickled sampler's
too), is refused by name; plain Python types (torch.load(weights_only=True)); a bload 0.1 state
loads with a warning; and a state saved by Python loads into the C++ sampler and back."""

import io
import pickle
import subprocess
import warnings

import bload
import pytest
import torch
from conftest import DATA, ROOT

T_MAX, BLOCKS = 94, 2
AG = DATA / "action_genome_like.lengths"
INTEROP = ROOT / "build" / "tests" / "cpp" / "bload_state_interop"


def served(sampler, count):
    batches = iter(sampler)
    return [next(batches).table for _ in range(count)]


def saved_after(count=3, **options):
    sampler = bload.BlockSampler(AG, T_MAX, BLOCKS, world_size=2, rank=0, seed=3, **options)
    served(sampler, count)
    return sampler.state_dict()


def test_the_state_holds_plain_values_with_the_identity_of_the_plan():
    state = saved_after()
    assert set(state) == {
        "version",
        "sequences",
        "lengths_hash",
        "t_max",
        "blocks_per_batch",
        "world_size",
        "seed",
        "policy",
        "split_oversized",
        "epoch",
        "position",
        "next_epoch",
        "planned_world_size",
        "first_block",
        "checksum",
    }
    assert all(type(value) in (int, bool, str) for value in state.values())
    assert (
        state["sequences"],
        state["t_max"],
        state["seed"],
        state["policy"],
        state["position"],
    ) == (7464, T_MAX, 3, "best_fit", 3)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=True) == state


@pytest.mark.parametrize(
    "options, expected",
    [
        ({"seed": 4}, "state['seed'] = 3: expected 4 as this sampler has"),
        ({"t_max": 95}, "state['t_max'] = 94: expected 95 as this sampler has"),
        (
            {"policy": "random_fill"},
            'state[\'policy\'] = "best_fit": expected "random_fill" as this sampler has',
        ),
        (
            {"policy": "lanes"},
            'state[\'policy\'] = "best_fit": expected "lanes" as this sampler has',
        ),
        ({"split": True}, "state['split_oversized'] = false: expected true as this sampler has"),
        ({"lengths": bload.read_lengths(AG).flip(0)}, "state['lengths_hash'] = "),
        (
            {"lengths": list(range(1, 95))},
            "state['sequences'] = 7464: expected 94 as this sampler has",
        ),
    ],
)
def test_a_state_of_other_lengths_or_options_is_refused_naming_each_field(options, expected):
    state = saved_after()
    made = {"lengths": AG, "t_max": T_MAX, "seed": 3, **options}
    sampler = bload.BlockSampler(
        made.pop("lengths"), made.pop("t_max"), BLOCKS, world_size=2, rank=0, **made
    )
    before = sampler.state_dict()
    with pytest.raises(RuntimeError) as error:
        sampler.load_state_dict(state)
    assert expected in str(error.value)
    assert "the state was saved with other lengths or options" in str(error.value)
    assert sampler.state_dict() == before


def test_a_state_of_bload_0_1_loads_with_a_warning_that_says_what_was_not_checked():
    state = saved_after()
    old = {name: state[name] for name in ("epoch", "position", "world_size", "blocks_per_batch")}
    sampler = bload.BlockSampler(AG, T_MAX, BLOCKS, world_size=2, rank=0, seed=3)
    with pytest.warns(UserWarning, match="no 'version'.*cannot be checked"):
        sampler.load_state_dict(old)
    assert sampler.state_dict() == state


def test_a_pickled_sampler_with_any_byte_flipped_is_refused_or_serves_the_same_batches():
    lengths = bload.read_lengths(AG)[:300]
    sampler = bload.BlockSampler(lengths, T_MAX, BLOCKS, world_size=2, rank=1, seed=3)
    served(sampler, 5)
    data = pickle.dumps(sampler)
    expected = served(pickle.loads(data), 3)
    refused = same = 0
    for i in range(len(data)):
        flipped = bytearray(data)
        flipped[i] ^= 0xFF
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                copy = pickle.loads(bytes(flipped))
            got = served(copy, 3)
        except Exception:  # noqa: BLE001 -- any refusal is right; a wrong plan is not
            refused += 1
            continue
        assert all(map(torch.equal, got, expected)), f"byte {i}: another plan loaded without a word"
        same += 1
    assert refused > len(data) // 2


@pytest.mark.skipif(
    not INTEROP.exists(), reason="the C++ tests were not built (make test-cpp builds them)"
)
def test_a_state_saved_by_python_loads_into_the_cpp_sampler_and_back(tmp_path):
    python = bload.BlockSampler(AG, T_MAX, BLOCKS, world_size=2, rank=1, seed=0)
    served(python, 3)
    torch.save(python.state_dict(), tmp_path / "python.pt")
    # A new iteration starts the epoch over; going on from batch 3 is a resume from the state.
    python.load_state_dict(python.state_dict())
    following = [batch.table for batch in python]  # batches 3, 4, ... of the epoch
    result = subprocess.run(
        [
            INTEROP,
            AG,
            str(T_MAX),
            "2",
            "1",
            str(BLOCKS),
            tmp_path / "python.pt",
            tmp_path / "cpp.pt",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    cells = [int(cell) for cell in result.stdout.split()]
    assert cells == following[0].flatten().tolist()
    # The C++ sampler's state after that batch, into Python: it goes on with batch 5.
    resumed = bload.BlockSampler(AG, T_MAX, BLOCKS, world_size=2, rank=1, seed=0)
    # torch::pickle_save tags the dict's types with a function torch.load's default
    # (weights_only=True) refuses unless told of it: bload tells it.
    resumed.load_state_dict(torch.load(tmp_path / "cpp.pt"))
    assert all(map(torch.equal, [batch.table for batch in resumed], following[1:]))
    # The C++ sampler refuses a state of other options by name.
    other = bload.BlockSampler(AG, T_MAX, BLOCKS, world_size=2, rank=1, seed=9)
    torch.save(other.state_dict(), tmp_path / "other.pt")
    result = subprocess.run(
        [INTEROP, AG, str(T_MAX), "2", "1", str(BLOCKS), tmp_path / "other.pt", tmp_path / "x.pt"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "state['seed'] = 9: expected 0 as this sampler has" in result.stderr


def pickled_state(**changes):
    """A pickled sampler's state (what __setstate__ gets), with `changes`."""
    sampler = bload.BlockSampler(AG, T_MAX, BLOCKS, world_size=2, rank=0, seed=3)
    served(sampler, 2)
    state = sampler.__getstate__()
    state.update(changes)
    return {name: value for name, value in state.items() if value is not DROP}


DROP = object()


@pytest.mark.parametrize(
    "changes, message",
    [
        # The sampler's own attributes against the planner's options: another rank's batches,
        # or blocks the plan does not have, if taken as they are.
        (dict(rank=5), r"rank = 5: expected a rank from 0 to 1"),
        (dict(blocks_per_batch=3), r"blocks_per_batch = 3: expected 2, the planner's"),
        (dict(t_max=50), r"t_max = 50: expected 94, the planner's"),
        (dict(world_size=1), r"world_size = 1: expected 2, the planner's"),
        (dict(seed=4), r"seed = 4: expected 3, the planner's"),
        (dict(_state=DROP), r"_state = None: expected the dict state_dict\(\) returns"),
        (dict(_planner=None), r"_planner = None: expected \(the lengths' dtype"),
        (dict(_planner=("int16", b"", "{}")), r"_planner = \('int16'"),
    ],
)
def test_a_pickled_sampler_whose_parts_disagree_is_refused_naming_the_part(changes, message):
    # What pickle.loads does with a pickle's state: a bare object, then __setstate__.
    sampler = bload.BlockSampler.__new__(bload.BlockSampler)
    with pytest.raises(ValueError, match="a pickled BlockSampler whose " + message):
        sampler.__setstate__(pickled_state(**changes))


def test_a_refused_pickle_leaves_the_sampler_as_it_was():
    sampler = bload.BlockSampler(AG, T_MAX, BLOCKS, world_size=2, rank=0, seed=3)
    before = dict(sampler.__dict__)
    for changes in (dict(read_ahead="x", epoch=99), dict(epoch=99, _state={"version": 1})):
        with pytest.raises((TypeError, ValueError, RuntimeError)):
            sampler.__setstate__(pickled_state(**changes))
        assert sampler.__dict__ == before, changes


@pytest.mark.parametrize("field", ["epoch", "position"])
def test_a_state_of_an_int_beyond_64_bits_is_refused_naming_it(field):
    sampler = bload.BlockSampler(AG, T_MAX, BLOCKS, world_size=2, rank=0, seed=3)
    state = dict(saved_after(), **{field: 2**63})
    with pytest.raises(ValueError, match=rf"state\['{field}'\] = {2**63}: expected an int from"):
        sampler.load_state_dict(state)
