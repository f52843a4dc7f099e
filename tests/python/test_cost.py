"""cost=: blocks dealt to ranks by what they cost (docs/cost_balance.md), from BlockSampler and the
torch.classes Planner, with the imbalance in stats(), pickles and state dicts that keep it."""

import pickle

import bload
import pytest
import torch
from conftest import COLUMN

T_MAX, WORLD = 40, 4


def sampler(lengths, rank=0, cost="steps", **kwargs):
    return bload.BlockSampler(
        lengths, T_MAX, world_size=WORLD, rank=rank, split=True, cost=cost, **kwargs
    )


def pieces(tables):
    return sorted(
        (int(row[COLUMN["sequence"]]), int(row[COLUMN["offset"]]), int(row[COLUMN["length"]]))
        for table in tables
        for row in table
    )


def test_every_rank_gets_the_same_batches_and_every_piece_once(action_genome_lengths):
    by_rank = [
        [batch.table for batch in sampler(action_genome_lengths, rank, "attention:1")]
        for rank in range(WORLD)
    ]
    assert len({len(batches) for batches in by_rank}) == 1
    steps = [
        [batch.table for batch in sampler(action_genome_lengths, rank)] for rank in range(WORLD)
    ]
    # The same pieces as dealing by steps, each once, only dealt otherwise.
    dealt = pieces(table for batches in by_rank for table in batches)
    assert dealt == pieces(table for batches in steps for table in batches)
    assert len(dealt) == len(set(dealt))


def test_stats_report_the_imbalance_in_the_samplers_cost(action_genome_lengths):
    balanced = sampler(action_genome_lengths, cost="attention:1").stats()
    by_steps = sampler(action_genome_lengths).stats()
    assert set(balanced["rank_cost_imbalance"]) == {"mean", "worst"}
    assert (
        1.0 <= balanced["rank_cost_imbalance"]["mean"] <= balanced["rank_cost_imbalance"]["worst"]
    )
    assert by_steps["rank_cost_imbalance"]["mean"] >= 1.0
    assert balanced["blocks"] == by_steps["blocks"] and balanced["padding"] == by_steps["padding"]
    # The plan itself answers too, as (mean, worst).
    planner = torch.classes.bload.Planner(
        torch.tensor(action_genome_lengths),
        T_MAX,
        world_size=WORLD,
        split_oversized=True,
        cost="attention:1",
    )
    mean, worst = planner.plan(0).rank_cost_imbalance()
    assert (mean, worst) == (
        balanced["rank_cost_imbalance"]["mean"],
        balanced["rank_cost_imbalance"]["worst"],
    )


def test_the_cost_is_kept_by_pickles_and_state_dicts(action_genome_lengths):
    original = sampler(action_genome_lengths, cost="attention:16")
    next(iter(original))
    copy = pickle.loads(pickle.dumps(original))
    assert copy.plan_hash() == original.plan_hash()
    state = original.state_dict()
    assert state["cost"] == "attention:16"
    with pytest.raises(
        RuntimeError, match=r"state\['cost'\] = \"attention:16\": expected \"steps\""
    ):
        sampler(action_genome_lengths).load_state_dict(state)
    # A steps state holds no cost (as states saved before the option): a sampler dealing by
    # another cost refuses it, naming the cost.
    steps_state = sampler(action_genome_lengths).state_dict()
    assert "cost" not in steps_state
    with pytest.raises(
        RuntimeError, match=r"state\['cost'\] = \"steps\": expected \"attention:16\""
    ):
        sampler(action_genome_lengths, cost="attention:16").load_state_dict(steps_state)


@pytest.mark.parametrize("bad", ["flops", "attention", "attention:-3", "attention:4294967297"])
def test_bad_costs_are_named(action_genome_lengths, bad):
    with pytest.raises(RuntimeError, match=f'cost = "{bad}": expected "steps" or "attention:A"'):
        sampler(action_genome_lengths, cost=bad)


def test_a_cost_of_another_type_or_with_lanes_is_refused(action_genome_lengths):
    with pytest.raises(TypeError, match="cost = 4096: expected a string"):
        sampler(action_genome_lengths, cost=4096)
    with pytest.raises(
        RuntimeError, match='cost = "attention:1": expected "steps" with the lanes policy'
    ):
        sampler(action_genome_lengths, cost="attention:1", policy="lanes")
