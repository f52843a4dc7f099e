"""The running-sum data set of tests/support is its documented definition: features drawn by
randn from the generator seeded with seed * 1000003 + i, the same values as torch's default
generator seeded so (how examples/tch_trainer.rs draws them, tch::manual_seed then randn), and
the scaled running sum of the first feature as target."""

import bload
import pytest
import torch
from running_sum import FEATURES, RunningSum, sequence_seed


@pytest.mark.parametrize("seed", [0, 3])
def test_each_sequence_is_its_definition(seed):
    lengths = [5, 1, 12, 7]
    dataset = RunningSum(lengths, seed)
    assert len(dataset) == len(lengths)
    state = torch.get_rng_state()
    try:
        for index, steps in enumerate(lengths):
            features, target = dataset[index]
            torch.manual_seed(seed * 1000003 + index)  # the default generator, as tch seeds it
            assert sequence_seed(seed, index) == seed * 1000003 + index
            assert torch.equal(features, torch.randn(steps, FEATURES))
            assert features.dtype == target.dtype == torch.float32
            expected = torch.stack(
                [features[: t + 1, 0].sum() / (t + 1) ** 0.5 for t in range(steps)]
            )
            torch.testing.assert_close(target[:, 0], expected)
            assert target.shape == (steps, 1)
    finally:
        torch.set_rng_state(state)


def test_sequences_differ_by_index_and_seed():
    first, other_seed = RunningSum([6, 6], 0), RunningSum([6, 6], 1)
    assert not torch.equal(first[0][0], first[1][0])
    assert not torch.equal(first[0][0], other_seed[0][0])
    assert torch.equal(first[1][0], RunningSum([9, 6], 0)[1][0])  # another sequence's length


def test_spawned_workers_load_the_same_packed_batches():
    # CUDA trainers spawn their ranks, and so their DataLoader workers: the dataset and sampler
    # are pickled to each worker (a torch.Generator there failed: the first GPU run's feed steps).
    lengths = [7, 3, 12, 5, 9, 1, 4, 11, 6, 8]
    sampler = bload.BlockSampler(lengths, 12, 2, world_size=1, rank=0)
    dataset = bload.BlockDataset(RunningSum(lengths, 3), 12)

    def batches(**workers):
        loader = torch.utils.data.DataLoader(
            dataset, batch_sampler=sampler, collate_fn=bload.collate, **workers
        )
        return [(batch.table, batch.data, batch.target) for batch in loader]

    spawned = batches(num_workers=1, multiprocessing_context="spawn")
    in_process = batches()
    assert len(spawned) == len(in_process) == len(sampler)
    for got, want in zip(spawned, in_process):
        for got_tensor, want_tensor in zip(got, want):
            assert torch.equal(got_tensor, want_tensor)
