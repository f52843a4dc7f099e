"""Faults in DDP training, each a multi-process run of the trainers of examples/ with a hard
timeout (a hang is a failure): ranks started with different options stop with an error that
names what differs, on every rank; a rank whose batch holds no piece trains on (loss 0, valid
JSON)."""

import json
import math
import sys

import pytest
import torch
import torch.distributed as dist

from ddp_support import CPP_TRAINER, PY_TRAINER, free_port, run, run_ranks, torchrun_env

SEQUENCES = 100  # the first 100 Action-Genome-shaped sequences: a batch or two per rank


# One rank started with another seed, or another t_max: both still make a valid plan, so
# without the check they would train (each its own plan) and report success.
DISAGREEMENTS = [(["--seed", "1"], "ranks disagree on seed: rank 0 has 0, rank 1 has 1"),
                 (["--t-max", "120"], "ranks disagree on t_max: rank 0 has 94, rank 1 has 120")]  # fmt: skip


@pytest.mark.parametrize("other, expected", DISAGREEMENTS)
def test_cpp_trainer_ranks_that_disagree_stop_naming_the_field(other, expected):
    # The ranks by hand (--rank, --port) at a store this test hosts, as the launcher would.
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    command = [CPP_TRAINER, "--world-size", 2, "--sequences", SEQUENCES, "--timeout", 60, "--port", store.port]
    results = run_ranks([command + ["--rank", 0], command + ["--rank", 1] + other])
    for rank, (returncode, _, stderr) in enumerate(results):
        assert returncode == 3, stderr[-2000:]
        assert f"rank {rank}: stopped after 1 collectives: bload::check_agreement: {expected}" in stderr, stderr[-2000:]


@pytest.mark.parametrize("other, expected", DISAGREEMENTS)
def test_python_trainer_ranks_that_disagree_stop_naming_the_field(other, expected):
    port = free_port()
    command = [sys.executable, PY_TRAINER, "--sequences", SEQUENCES, "--timeout", 60]
    results = run_ranks([command, command + other], [torchrun_env(rank, 2, port) for rank in range(2)])
    for rank, (returncode, _, stderr) in enumerate(results):
        assert returncode == 3, stderr[-2000:]
        assert f"rank {rank}: stopped: bload::check_agreement: {expected}" in stderr, stderr[-2000:]


def strict_json(line):
    """json.loads that refuses NaN and infinity, which Python's parser accepts and JSON lacks."""

    def refuse(constant):
        raise ValueError(f"{constant} in a JSON report: {line}")

    return json.loads(line, parse_constant=refuse)


@pytest.mark.parametrize("trainer", ["cpp", "python"])
def test_a_batch_of_padding_only_trains_with_loss_zero(action_genome_lengths, trainer):
    """Three sequences alone in their blocks on 2 ranks of one block a batch: 4 blocks, one empty,
    so one rank's batch has no piece. Its loss is 0 (not 0/0): the epoch finishes, and the JSON
    report holds numbers only."""
    lengths = action_genome_lengths[:3]
    planner = torch.classes.bload.Planner(torch.tensor(lengths), 94, world_size=2, policy="pad_to_max")
    tables = [planner.batch(0, rank, index) for rank in range(2) for index in range(planner.batches_per_rank(0))]
    assert min(len(table) for table in tables) == 0  # the precondition: a batch without a piece
    options = ["--world-size", 2, "--sequences", 3, "--policy", "pad_to_max", "--blocks-per-batch", 1, "--timeout", 60, "--json"]
    command = [CPP_TRAINER] if trainer == "cpp" else [sys.executable, PY_TRAINER]
    result = run(command + options)
    assert result.returncode == 0, result.stderr[-4000:]
    epoch = strict_json(result.stdout.strip().splitlines()[-1])["epochs"][0]
    assert epoch["batches_per_rank"] == [planner.batches_per_rank(0)] * 2
    assert epoch["frames"] == sum(lengths) and epoch["padding"] == planner.stats(0)["padding"]
    assert all(math.isfinite(epoch[key]) for key in ("first_loss", "last_loss", "loader_wait_share"))
