"""bload.integrations.torchdata: a StatefulDataLoader over bload's sampler resumes mid-epoch
exactly through its own state_dict, workers on."""

import pickle

import bload
import pytest
import torch
from bload.integrations import torchdata as bload_torchdata
from integration_support import BLOCKS, SEED, T_MAX, Numbered, lengths_of, plan_tables


def loader_of(lengths, workers, world_size=2, rank=1):
    sampler = bload.BlockSampler(
        lengths, T_MAX, BLOCKS, world_size=world_size, rank=rank, seed=SEED
    )
    return sampler, bload_torchdata.stateful_loader(Numbered(lengths), sampler, num_workers=workers)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_saved_mid_epoch_resumes_exactly_the_uninterrupted_batches(workers):
    lengths = lengths_of(300, seed=1)
    expected = plan_tables(lengths, 2, 1, epoch=3)
    sampler, loader = loader_of(lengths, workers)
    sampler.set_epoch(3)
    trained = []
    for batch in loader:  # the workers have fetched batches past this one
        trained.append(batch.table)
        if len(trained) == 5:
            state = pickle.loads(pickle.dumps(loader.state_dict()))
            break
    # A new process's loader: same sampler options, the loader's state loaded.
    sampler, loader = loader_of(lengths, workers)
    loader.load_state_dict(state)
    sampler.set_epoch(3)  # as the epoch loop does: the state decides where the epoch goes on
    trained += [batch.table for batch in loader]
    assert len(trained) == len(expected) and all(map(torch.equal, trained, expected))
    # The next epoch is whole.
    sampler.set_epoch(4)
    following = [batch.table for batch in loader]
    assert all(map(torch.equal, following, plan_tables(lengths, 2, 1, epoch=4)))


def test_a_state_saved_at_the_last_batch_leaves_nothing_of_the_epoch_and_the_next_is_whole():
    lengths = lengths_of(120, seed=2)
    sampler, loader = loader_of(lengths, 2)
    sampler.set_epoch(0)
    batches = len(plan_tables(lengths, 2, 1, epoch=0))
    for index, _ in enumerate(loader):
        if index == batches - 1:
            state = loader.state_dict()  # in the loop, after the last batch's step
    sampler, loader = loader_of(lengths, 2)
    loader.load_state_dict(state)
    sampler.set_epoch(0)
    assert [batch for batch in loader] == []
    sampler.set_epoch(1)
    assert all(
        map(torch.equal, [batch.table for batch in loader], plan_tables(lengths, 2, 1, epoch=1))
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_saved_after_the_epochs_loop_resumes_with_the_next_epoch_set(workers):
    # The loader loads its state as its next iteration starts, after the loop's set_epoch: the
    # state's epoch, served, does not take the place of the one set.
    lengths = lengths_of(120, seed=2)
    sampler, loader = loader_of(lengths, workers)
    sampler.set_epoch(0)
    assert len([batch for batch in loader]) == len(plan_tables(lengths, 2, 1, epoch=0))
    state = loader.state_dict()  # the epoch's iteration has ended
    sampler, loader = loader_of(lengths, workers)
    loader.load_state_dict(state)
    for epoch in (1, 2):
        sampler.set_epoch(epoch)
        tables = [batch.table for batch in loader]
        expected = plan_tables(lengths, 2, 1, epoch=epoch)
        assert len(tables) == len(expected) and all(map(torch.equal, tables, expected)), epoch


@pytest.mark.parametrize(
    "options, error, expected",
    [
        ({"batch_size": 4}, TypeError, r"batch_size = 4: expected it unset"),
        ({"collate_fn": list}, TypeError, r"collate_fn = <class 'list'>: expected it unset"),
        ({"in_order": False}, ValueError, r"in_order = False: expected True"),
    ],
)
def test_options_bload_sets_or_that_break_the_order_are_refused(options, error, expected):
    sampler = bload.BlockSampler(lengths_of(20), T_MAX, BLOCKS)
    with pytest.raises(error, match=expected):
        bload_torchdata.stateful_loader(Numbered(lengths_of(20)), sampler, **options)
    with pytest.raises(TypeError, match="sampler: expected a bload.BlockSampler, got list"):
        bload_torchdata.stateful_loader(Numbered(lengths_of(20)), [])
