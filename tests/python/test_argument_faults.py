"""Bad arguments named, never read as something else: a float or bool tensor of sequences for
source_of, a bool or float among a list's lengths, a bload 0.1 state the sampler could not save
again (or one that is not 0.1's), a LaneState's shape and saved state, a mixture weight past the
largest float. Each error names the argument, its value and what was expected."""

import pickle
import warnings

import bload
import pytest
import torch
from integration_support import Numbered

T_MAX = 10
A, B = [3, 5, 2, 7, 1, 4], [6, 6, 2, 8]


def mixture():
    return bload.BlockSampler(sources=[(A, 1), (B, 1)], t_max=T_MAX)


# source_of


@pytest.mark.parametrize(
    "index, dtype",
    [
        (torch.tensor([5.7, 6.2]), "float32"),  # was read as sequences 5 and 6
        (torch.tensor([-0.5]), "float32"),  # was read as sequence 0
        (torch.tensor([True, False]), "bool"),  # was read as sequences 1 and 0
        (torch.tensor([1.0], dtype=torch.float64), "float64"),
        (torch.tensor([3j]), "complex64"),
    ],
)
def test_source_of_refuses_a_tensor_that_is_not_of_integers(index, dtype):
    with pytest.raises(
        TypeError, match=rf"index = a {dtype} tensor: expected an int or an integer tensor"
    ):
        mixture().source_of(index)


def test_source_of_takes_integer_tensors_of_any_width_and_names_one_out_of_range():
    s = mixture()
    for dtype in (torch.uint8, torch.int16, torch.int32, torch.int64, torch.uint64):
        source, index = s.source_of(torch.tensor([3, 7], dtype=dtype))
        assert source.tolist() == [0, 1] and index.tolist() == [3, 1]
    # 2^63 as uint64 is not the negative int64 it would be read as.
    with pytest.raises(ValueError, match=rf"index = {2**63}: expected a sequence from 0 to 9"):
        s.source_of(torch.tensor([3, 2**63], dtype=torch.uint64))


# Lengths given as a sequence


@pytest.mark.parametrize(
    "lengths, error, message",
    [
        ([3, True, 4], TypeError, r"lengths\[1\] = True: expected an int"),  # was 1
        ([3, False, 4], TypeError, r"lengths\[1\] = False: expected an int"),
        ([True, False], TypeError, r"lengths\[0\] = True: expected an int"),
        ([3, 4.5], TypeError, r"lengths\[1\] = 4\.5: expected an int"),  # was "a list of ints"
        ([3, 4.0], TypeError, r"lengths\[1\] = 4\.0: expected an int"),
        ((3, float("nan")), TypeError, r"lengths\[1\] = nan: expected an int"),
        ([3, "4"], TypeError, r"lengths\[1\] = '4': expected an int"),
        ([3, None], TypeError, r"lengths\[1\] = None: expected an int"),
        (
            [torch.tensor(3), torch.tensor(True)],  # was 1
            TypeError,
            r"lengths\[1\] = tensor\(True\): expected an int",
        ),
        (
            [torch.tensor(3), torch.tensor(2.5)],
            TypeError,
            r"lengths\[1\] = tensor\(2\.5000\): expected an int",
        ),
        ([3, 2**64], ValueError, rf"lengths\[1\] = {2**64}: expected an int that fits 64 bits"),
    ],
)
def test_an_element_of_a_lengths_sequence_that_is_not_an_int_is_named(lengths, error, message):
    with pytest.raises(error, match=message):
        bload.BlockSampler(lengths, t_max=T_MAX)


def test_numpy_scalars_among_lengths_are_ints_or_named():
    np = pytest.importorskip("numpy")
    s = bload.BlockSampler([np.int64(3), np.int32(1), torch.tensor(4), 1], t_max=T_MAX)
    assert s.stats()["steps"] == 9
    with pytest.raises(TypeError, match=r"lengths\[1\] = np\.True_: expected an int"):
        bload.BlockSampler([3, np.True_], t_max=T_MAX)
    with pytest.raises(TypeError, match=r"lengths\[0\] = np\.float64\(3\.0\): expected an int"):
        bload.BlockSampler([np.float64(3.0), 3], t_max=T_MAX)


def test_lengths_of_one_step_are_lengths_and_a_bad_one_among_them_is_named():
    lengths = [1] * 1000 + [5] * 1000
    assert bload.BlockSampler(lengths, t_max=T_MAX).stats()["steps"] == 6000
    lengths[1500] = True
    with pytest.raises(TypeError, match=r"lengths\[1500\] = True: expected an int"):
        bload.BlockSampler(lengths, t_max=T_MAX)


def test_a_sparse_lengths_tensor_is_named():
    sparse = torch.tensor([3, 4, 5]).to_sparse()
    with pytest.raises(RuntimeError, match="lengths: expected a dense tensor of sequence lengths"):
        bload.BlockSampler(sparse, t_max=T_MAX)


def test_a_mixture_names_the_source_of_a_bad_length():
    with pytest.raises(TypeError, match=r"sources\[1\]\.lengths\[2\] = True: expected an int"):
        bload.BlockSampler(sources=[(A, 1), ([3, 4, True], 1)], t_max=T_MAX)


# Mixture weights


@pytest.mark.parametrize("weight", [10**400, -(10**400)])
def test_a_weight_past_the_largest_float_is_named(weight):
    with pytest.raises(
        ValueError, match=r"sources\[0\]\.weight = -?10+: expected a finite number above 0"
    ):
        bload.BlockSampler(sources=[(A, weight), (B, 1)], t_max=T_MAX)


def test_an_int_too_long_to_print_is_named_by_its_size():
    with pytest.raises(ValueError, match=r"epoch = an int of \d+ bits: expected an int from 0"):
        mixture().set_epoch(10**5000)


# A bload 0.1 state


def load_0_1(state, sampler=None):
    sampler = sampler or bload.BlockSampler(A + B, t_max=8, world_size=2, rank=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sampler.load_state_dict(state)
    return sampler


@pytest.mark.parametrize(
    "changes, error, message",
    [
        # Its next epoch (what state_dict() saves) would not be an int64.
        (
            {"epoch": 2**63 - 1},
            ValueError,
            r"state\['epoch'\] = 9223372036854775807: expected an int from 0 to "
            r"9223372036854775806",
        ),
        ({"epoch": -1}, ValueError, r"state\['epoch'\] = -1: expected an int from 0"),
        ({"position": -1}, ValueError, r"state\['position'\] = -1: expected an int from 0"),
        (
            {"position": 99},
            RuntimeError,
            r"state\['position'\] = 99: expected from 0 to \d+, the batches per rank",
        ),
        ({"world_size": 0}, ValueError, r"state\['world_size'\] = 0: expected an int from 1"),
        (
            {"world_size": 2**40},
            ValueError,
            rf"state\['world_size'\] = {2**40}: expected an int from 1 to 4294967295",
        ),
        (
            {"planned_world_size": 0},
            ValueError,
            r"state\['planned_world_size'\] = 0: expected an int from 1",
        ),
        (
            {"first_block": 10**6},
            RuntimeError,
            r"state\['first_block'\] = 1000000: expected from 0 to \d+, the blocks of epoch 0",
        ),
        (
            {"foo": 1},
            ValueError,
            r"state\['version'\] = missing: expected the version state_dict\(\) saves; .* not "
            r"'foo'",
        ),
    ],
)
def test_a_bad_state_of_bload_0_1_is_named_by_its_own_keys(changes, error, message):
    sampler = bload.BlockSampler(A + B, t_max=8, world_size=2, rank=0)
    before = sampler.state_dict()
    with pytest.raises(error, match=message):
        load_0_1({"epoch": 0, "position": 1, "world_size": 2, **changes}, sampler)
    assert sampler.state_dict() == before


def test_a_state_of_bload_0_1_loads_up_to_the_last_epoch_and_saves_again():
    # One epoch further was loaded, and then neither saved nor pickled.
    sampler = bload.BlockSampler(A + B, t_max=8, world_size=2, rank=0)
    with pytest.raises(ValueError, match=r"state\['epoch'\] = 9223372036854775807: expected"):
        load_0_1({"epoch": 2**63 - 1, "position": 1, "world_size": 2}, sampler)
    assert pickle.loads(pickle.dumps(sampler)).state_dict() == sampler.state_dict()
    sampler = load_0_1({"epoch": 2**63 - 2, "position": 1, "world_size": 2}, sampler)
    state = sampler.state_dict()
    assert (state["epoch"], state["position"], state["next_epoch"]) == (2**63 - 2, 1, 2**63 - 1)
    assert pickle.loads(pickle.dumps(sampler)).state_dict() == state


def test_a_state_without_its_version_is_named_by_the_version():
    sampler = bload.BlockSampler(A + B, t_max=8, world_size=2, rank=0)
    next(iter(sampler))
    state = sampler.state_dict()
    del state["version"]
    with pytest.raises(ValueError, match=r"state\['version'\] = missing: .* not 'sequences'"):
        load_0_1(state)


def test_a_state_int_too_long_to_print_is_named_by_its_size():
    sampler = bload.BlockSampler(A + B, t_max=8)
    state = {**sampler.state_dict(), "epoch": 10**5000}
    with pytest.raises(ValueError, match=r"state\['epoch'\] = an int of \d+ bits: expected an int"):
        sampler.load_state_dict(state)


# LaneState


def lanes_sampler():
    return bload.BlockSampler(A + B, T_MAX, 2, policy="lanes", split=True)


@pytest.mark.parametrize(
    "shape, error, message",
    [
        ("16", TypeError, r"shape = '16': expected a lane state's shape"),  # was [2, 1, 6]
        ((2.7,), TypeError, r"shape = \(2\.7,\): shape\[0\] = 2\.7: expected"),  # was (2,)
        ((True, 3), TypeError, r"shape = \(True, 3\): shape\[0\] = True: expected"),
        (True, TypeError, r"shape = True: expected a lane state's shape"),
        (None, TypeError, r"shape = None: expected a lane state's shape"),
        ((-1,), ValueError, r"shape = \(-1,\): shape\[0\] = -1: expected a size from 0"),
        (-3, ValueError, r"shape = -3: expected a size from 0"),
        ([4, 2**63], ValueError, rf"shape\[1\] = {2**63}: expected a size from 0 to 2\^63 - 1"),
    ],
)
def test_a_lane_shape_that_is_not_sizes_is_named(shape, error, message):
    with pytest.raises(error, match=message):
        bload.LaneState(lanes_sampler(), shape)


def test_a_lane_shape_too_big_for_a_tensor_is_named():
    # Was torch's "Storage size calculation overflowed", naming neither shape nor its rows.
    with pytest.raises(ValueError, match=r"shape = \(4294967296, 4294967296\): expected .* 2 rows"):
        bload.LaneState(lanes_sampler(), (2**32, 2**32))


def test_a_lane_shape_is_a_tuple_a_list_or_one_int():
    for shape in (16, (16,), [16], torch.Size([16])):  # 16 alone was not iterable
        assert bload.LaneState(lanes_sampler(), shape).state.shape == (2, 16)


@pytest.mark.parametrize(
    "state, error, message",
    [
        ([("lanes", 2)], TypeError, r"state = a list: expected the dict"),
        ({"state": torch.zeros(2, 4)}, ValueError, r"state\['lanes'\] = missing"),
        ({"lanes": 2}, ValueError, r"state\['state'\] = missing"),
        # 1 lane: True == 1 was taken as the count.
        ({"lanes": True, "state": torch.zeros(1, 4)}, TypeError, r"state\['lanes'\] = True"),
        ({"lanes": 1.0, "state": torch.zeros(1, 4)}, TypeError, r"state\['lanes'\] = 1\.0"),
        ({"lanes": 1, "state": [[0.0] * 4]}, TypeError, r"state\['state'\] = a list: expected"),
    ],
)
def test_a_bad_saved_lane_state_is_named(state, error, message):
    sampler = bload.BlockSampler(A + B, T_MAX, 1, policy="lanes", split=True)
    lanes = bload.LaneState(sampler, (4,))
    with pytest.raises(error, match=message):
        lanes.load_state_dict(state)
    assert torch.equal(lanes.state, torch.zeros(1, 4))


def test_a_final_state_that_is_not_a_tensor_is_named():
    np = pytest.importorskip("numpy")
    sampler = lanes_sampler()
    batch = bload.BlockDataset(Numbered(A + B), T_MAX).__getitems__(next(iter(sampler)))
    lanes = bload.LaneState(sampler, (4,))
    with pytest.raises(TypeError, match="final_state = a ndarray: expected a tensor"):
        lanes.update(batch, np.zeros((2, 4)))
    with pytest.raises(TypeError, match="final_states = a list: expected a tensor"):
        lanes.update_pieces(batch, [[0.0] * 4])
    assert torch.equal(lanes.state, torch.zeros(2, 4))
