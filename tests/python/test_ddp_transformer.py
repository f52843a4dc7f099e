"""The causal transformer of tests/support in both DDP trainers, on 2 gloo ranks: the Python one
runs it eager (SDPA with bload's dense mask on the CPU; flex_attention with the BlockMask on
CUDA), the C++ one loads it scripted (SDPA with torch.ops.bload.attention_mask). Every rank runs
as many batches as the plan says, the loss is finite and falls, both trainers see the same
losses from the same weights, and the model's outputs on the trainers' packed batches equal each
sequence run alone. Every run has a hard timeout, so a hang is a failure."""

import sys

import bload
import pytest
import torch
from ddp_support import CPP_TRAINER, PY_TRAINER, report_of, run
from models import build, scripted  # tests/support
from packed_transformer import causal_alone
from running_sum import RunningSum

COLUMN = bload.ops.COLUMN

SEQUENCES, T_MAX, BLOCKS = 240, 94, 8  # the trainers' defaults: a few batches per rank
COMMON = ["--world-size", 2, "--sequences", SEQUENCES, "--timeout", 60, "--json"]


@pytest.fixture(scope="module")
def transformer_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "packed_transformer.pt"
    scripted("transformer", 0).save(str(path))
    return path


@pytest.fixture(scope="module")
def reports(transformer_file):
    """The epoch figures of each trainer training the transformer (same seed, same weights)."""
    python = [sys.executable, PY_TRAINER, *COMMON, "--model", "transformer", "--device", "cpu"]
    cpp = [CPP_TRAINER, *COMMON, "--model", transformer_file]
    return {
        "python": report_of(run(python)),
        "cpp": report_of(run(cpp)),
    }


def test_ranks_run_the_plans_batches_and_the_loss_falls(action_genome_lengths, reports):
    planner = torch.classes.bload.Planner(
        torch.tensor(action_genome_lengths[:SEQUENCES]),
        T_MAX,
        blocks_per_batch=BLOCKS,
        world_size=2,
    )
    for trainer, report in reports.items():
        epoch = report["epochs"][0]
        assert report["world_size"] == 2 and report["backend"] == "gloo", trainer
        assert epoch["batches_per_rank"] == [planner.batches_per_rank(0)] * 2, trainer
        assert epoch["frames"] == sum(action_genome_lengths[:SEQUENCES]), trainer
        assert 0 < epoch["last_loss"] < epoch["first_loss"] < float("inf"), (trainer, epoch)


def test_both_trainers_train_alike(reports):
    """The eager model under Python's DDP and the scripted one in the C++ trainer: one model."""
    python, cpp = reports["python"]["epochs"][0], reports["cpp"]["epochs"][0]
    assert python["first_loss"] == pytest.approx(cpp["first_loss"], rel=1e-4)
    assert python["last_loss"] == pytest.approx(cpp["last_loss"], rel=1e-3)


def test_the_trained_model_sees_each_sequence_alone(action_genome_lengths, transformer_file):
    """On the first batch the trainers pack, the file the C++ trainer loads gives every piece the
    outputs of its sequence run alone."""
    lengths = action_genome_lengths[:SEQUENCES]
    model, eager = torch.jit.load(str(transformer_file)), build("transformer", 0)
    sampler = bload.BlockSampler(lengths, T_MAX, BLOCKS)
    loader = torch.utils.data.DataLoader(
        bload.BlockDataset(RunningSum(lengths, 0), T_MAX),
        batch_sampler=sampler,
        collate_fn=bload.collate,
    )
    batch = next(iter(loader))
    assert len(batch.table) > BLOCKS  # several sequences share a block
    dataset = RunningSum(lengths, 0)
    with torch.no_grad():
        packed = model(batch.data, batch.table)
        for row in batch.table.tolist():
            piece = dict(zip(COLUMN, row))
            features = dataset[piece["sequence"]][0][None]
            alone = eager.forward_with(features, torch.arange(piece["length"])[None], causal_alone)
            steps = slice(piece["block_offset"], piece["block_offset"] + piece["length"])
            torch.testing.assert_close(packed[piece["block"], steps], alone[0], rtol=0, atol=1e-5)


def test_lanes_are_refused_for_a_model_without_state(transformer_file):
    """Lanes carry a recurrent state from batch to batch: a model with no forward_lanes is named."""
    for command in (
        [CPP_TRAINER, "--model", transformer_file],
        [sys.executable, PY_TRAINER, "--model", transformer_file],
    ):
        options = ["--world-size", 2, "--sequences", 60, "--timeout", 60, "--policy", "lanes"]
        result = run(command + options + ["--t-max", 32])
        assert result.returncode != 0, result.stdout[-2000:]
        assert "expected a recurrent model (a forward_lanes method" in result.stderr, result.stderr
