"""Mixtures of sources (BlockSampler(sources=...), docs/mixtures.md): each source gives its
weight's share of an epoch's steps within one of its sequences, every chosen step is served once,
plans are the same run to run and differ from epoch to epoch, a state of another mixture is
refused by name, and a resumed or pickled sampler goes on exactly."""

import copy
import pickle

import bload
import pytest
import torch
from conftest import COLUMN, DATA

T_MAX, BLOCKS = 94, 2
AG = DATA / "action_genome_like.lengths"


def web():
    return [1 + (i * 7) % 60 for i in range(400)]


def code():
    return [20 + (i * 5) % 70 for i in range(30)]


def sampler(weights=(0.6, 0.4), rank=0, world_size=2, **options):
    sources = [
        bload.Source(web(), weights[0], name="web"),
        bload.Source(code(), weights[1], name="code"),
        (AG, weights[2] if len(weights) > 2 else 1.0),  # a lengths file, named by its index
    ]
    options = dict(world_size=world_size, rank=rank, seed=2) | options
    return bload.BlockSampler(sources=sources, t_max=T_MAX, blocks_per_batch=BLOCKS, **options)


def tables(s):
    return [batch.table for batch in s]


def test_each_source_gives_its_share_within_one_sequence():
    s = sampler((0.5, 0.3, 0.2))
    lengths = [web(), code(), bload.read_lengths(AG).tolist()]
    total = sum(sum(source) for source in lengths)
    for epoch in (0, 1):
        s.set_epoch(epoch)
        stats = s.stats()["sources"]
        assert [source["name"] for source in stats] == ["web", "code", "2"]
        for own, source in zip(lengths, stats):
            target = round(total * source["weight_share"])
            assert target <= source["steps"] < target + max(own), source
            assert source["source_sequences"] == len(own)
            assert source["repeats"] == max(0, source["sequences"] - len(own))
            assert source["left_out"] == max(0, len(own) - source["sequences"])
        assert [source["weight_share"] for source in stats] == pytest.approx([0.5, 0.3, 0.2])
        assert sum(source["steps"] for source in stats) == s.stats()["steps"]
    # "code" and "web" hold less than their shares: repeated; the lengths file more: drawn from.
    assert stats[1]["repeats"] > 0 and stats[1]["left_out"] == 0
    assert stats[2]["left_out"] > 0 and stats[2]["repeats"] == 0


def test_every_chosen_step_is_served_once_and_named_by_its_source():
    lengths = torch.tensor(web() + code() + bload.read_lengths(AG).tolist())
    served = torch.zeros(len(lengths), dtype=torch.long)
    for rank in (0, 1):
        for table in tables(sampler(rank=rank)):
            index = table[:, COLUMN["sequence"]]
            served.index_add_(0, index, table[:, COLUMN["length"]])
    # Every sequence served whole, a whole number of times: chosen `times` times.
    assert torch.all(served % lengths == 0)
    times = served // lengths
    stats = sampler().stats()["sources"]
    starts = [0, 400, 430, len(lengths)]
    for s, source in enumerate(stats):
        own = times[starts[s] : starts[s + 1]]
        assert int(own.sum()) == source["sequences"]
        assert int((served[starts[s] : starts[s + 1]]).sum()) == source["steps"]
        assert int((own == 0).sum()) == source["left_out"]
    # The batch's sequences map back to their sources.
    s = sampler()
    assert s.source_of(0) == ("web", 0)
    assert s.source_of(429) == ("code", 29)
    assert s.source_of(430) == ("2", 0)
    source, index = s.source_of(torch.tensor([5, 401, 431]))
    assert source.tolist() == [0, 1, 2] and index.tolist() == [5, 1, 1]
    with pytest.raises(ValueError, match=r"index = 100000: expected a sequence from 0 to"):
        s.source_of(100000)


def test_plans_are_deterministic_and_change_with_the_epoch():
    first, second = sampler(), sampler()
    assert all(torch.equal(a, b) for a, b in zip(tables(first), tables(second), strict=True))
    assert first.plan_hash() == second.plan_hash()
    second.set_epoch(1)
    assert second.plan_hash() != first.plan_hash()
    assert sampler((0.5, 0.5)).plan_hash() != first.plan_hash()


def test_a_state_of_another_mixture_is_refused_by_name():
    s = sampler()
    batches = iter(s)
    for _ in range(2):
        next(batches)
    state = s.state_dict()
    assert '"web" weight 0.6 (400 sequences)' in state["mixture"]
    with pytest.raises(
        RuntimeError, match=r"state\['mixture'\] = .*weight 0\.6.*expected .*weight 0\.5"
    ):
        sampler((0.5, 0.5)).load_state_dict(state)
    # A state of one lengths set holds no mixture: refused too, by the same field.
    single = bload.BlockSampler(web(), T_MAX, BLOCKS, world_size=2, rank=0, seed=2)
    with pytest.raises(RuntimeError, match=r"state\['mixture'\] = \"none\""):
        sampler().load_state_dict(single.state_dict())


def test_resume_mid_epoch_equals_the_uninterrupted_epoch():
    whole = tables(sampler())
    s = sampler()
    batches = iter(s)
    for _ in range(3):
        next(batches)
    resumed = sampler()
    resumed.load_state_dict(s.state_dict())
    rest = tables(resumed)
    assert len(rest) == len(whole) - 3
    assert all(torch.equal(a, b) for a, b in zip(rest, whole[3:], strict=True))
    # A pickled sampler is the same mixture, where it stood.
    copy = pickle.loads(pickle.dumps(s))
    assert copy.planner.mixture() == s.planner.mixture()
    assert all(torch.equal(a, b) for a, b in zip(tables(copy), whole[3:], strict=True))


@pytest.mark.parametrize(
    "sources, error, message",
    [
        (
            [(web(), 0.0)],
            RuntimeError,
            r"sources\[0\]\.weight = 0: expected a finite number above 0",
        ),
        (
            [(web(), -1)],
            RuntimeError,
            r"sources\[0\]\.weight = -1: expected a finite number above 0",
        ),
        ([(web(), float("nan"))], RuntimeError, r"sources\[0\]\.weight = NaN: expected"),
        ([(web(), "x")], TypeError, r"sources\[0\]\.weight = 'x': expected a number above 0"),
        ([(web(), 1), ([], 1)], RuntimeError, r"sources\[1\]\.lengths = an empty list: expected"),
        ([], RuntimeError, r"sources = an empty list: expected at least one source"),
        ([(web(), 1, "a"), (code(), 1, "a")], RuntimeError, r"sources\[1\]\.name = \"a\""),
        ([web()], TypeError, r"sources\[0\] = list: expected a bload.Source"),
        ([([1.5, 2.0], 1)], TypeError, r"sources\[0\]\.lengths\[0\] = 1\.5: expected an int"),
        (
            [(web(), 1), ([3, True], 1)],
            TypeError,
            r"sources\[1\]\.lengths\[1\] = True: expected an int",
        ),
        (
            [(web(), 10**400)],
            ValueError,
            r"sources\[0\]\.weight = 1000+: expected a finite number above 0",
        ),
        ([([3, 0], 1)], RuntimeError, r"sources\[0\]\.lengths\[1\] = 0: expected"),
    ],
)
def test_bad_sources_are_named(sources, error, message):
    with pytest.raises(error, match=message):
        bload.BlockSampler(sources=sources, t_max=T_MAX)


def test_lengths_and_sources_are_one_or_the_other():
    with pytest.raises(TypeError, match="lengths, sources: expected exactly one"):
        bload.BlockSampler(web(), T_MAX, sources=[(code(), 1)])
    with pytest.raises(TypeError, match="lengths, sources: expected exactly one"):
        bload.BlockSampler(t_max=T_MAX)


def test_a_pickled_planner_keeps_its_mixture():
    planner = sampler().planner
    for made_again in (pickle.loads(pickle.dumps(planner)), copy.deepcopy(planner)):
        assert made_again.mixture() == planner.mixture()
        assert made_again.source_starts() == planner.source_starts()
        assert made_again.plan_hash(3) == planner.plan_hash(3)


def test_weights_whose_sum_overflows_are_named():
    with pytest.raises(ValueError, match=r"sources' weights = \[1e\+308, 1e\+308\]: their sum"):
        bload.BlockSampler(sources=[(web(), 1e308), (code(), 1e308)], t_max=T_MAX)
