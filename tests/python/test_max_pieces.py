"""max_pieces=: the cap on a block's pieces, from BlockSampler, a mixture and the torch.classes
Planner: every block within it, the same pieces as without it, and pickles that keep it."""

import pickle

import bload
import pytest
import torch
from conftest import COLUMN

T_MAX, WORLD = 40, 2


def sampler(lengths, rank=0, **kwargs):
    return bload.BlockSampler(lengths, T_MAX, 2, world_size=WORLD, rank=rank, split=True, **kwargs)


def most_pieces(batches):
    """The most pieces any block of `batches` holds."""
    most = 0
    for batch in batches:
        blocks = batch.table[:, COLUMN["block"]]
        most = max(most, int(torch.bincount(blocks).max()))
    return most


def pieces(batches):
    return sorted(
        (int(row[COLUMN["sequence"]]), int(row[COLUMN["offset"]]), int(row[COLUMN["length"]]))
        for batch in batches
        for row in batch.table
    )


@pytest.mark.parametrize("policy", ["best_fit", "random_fill"])
def test_every_block_keeps_to_the_cap_and_every_piece_comes_once(action_genome_lengths, policy):
    free = [list(sampler(action_genome_lengths, rank, policy=policy)) for rank in range(WORLD)]
    assert max(most_pieces(batches) for batches in free) > 2
    capped = [
        list(sampler(action_genome_lengths, rank, policy=policy, max_pieces=2))
        for rank in range(WORLD)
    ]
    assert max(most_pieces(batches) for batches in capped) <= 2
    assert len({len(batches) for batches in capped}) == 1
    every = pieces(batch for batches in capped for batch in batches)
    assert every == pieces(batch for batches in free for batch in batches)
    assert len(every) == len(set(every))
    stats = sampler(action_genome_lengths, policy=policy, max_pieces=2).stats()
    # The bound counts the cap: at most 2 pieces in each of its blocks.
    assert stats["lower_bound_blocks"] * 2 >= stats["pieces"]
    assert stats["blocks"] >= stats["lower_bound_blocks"]


def test_a_pickled_sampler_and_planner_keep_the_cap(action_genome_lengths):
    capped = sampler(action_genome_lengths, max_pieces=3)
    copy = pickle.loads(pickle.dumps(capped))
    assert [b.table.tolist() for b in copy] == [b.table.tolist() for b in capped]
    lengths = torch.tensor(action_genome_lengths)
    planner = torch.classes.bload.Planner(lengths, 94, max_pieces=3)
    free = torch.classes.bload.Planner(lengths, 94)
    assert planner.plan_hash(0) != free.plan_hash(0)
    assert pickle.loads(pickle.dumps(planner)).plan_hash(0) == planner.plan_hash(0)


def test_a_mixture_keeps_to_the_cap(action_genome_lengths):
    sources = [bload.Source(action_genome_lengths[:3000], 1.0), (action_genome_lengths[3000:], 2)]
    mixed = bload.BlockSampler(sources=sources, t_max=94, world_size=1, rank=0, max_pieces=2)
    assert most_pieces(mixed) <= 2
    assert most_pieces(pickle.loads(pickle.dumps(mixed))) <= 2


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"max_pieces": 0}, ValueError, "max_pieces = 0: expected None"),
        ({"max_pieces": -1}, ValueError, "max_pieces = -1: expected None"),
        ({"max_pieces": 2.0}, TypeError, "max_pieces = 2.0: expected None"),
        ({"max_pieces": 2**40}, RuntimeError, "max_pieces = 1099511627776: expected from 1"),
        ({"max_pieces": 2, "policy": "lanes"}, RuntimeError, "max_pieces = 2: expected no cap"),
    ],
)
def test_bad_caps_name_max_pieces(action_genome_lengths, kwargs, error, message):
    with pytest.raises(error, match=message):
        sampler(action_genome_lengths, **kwargs)
