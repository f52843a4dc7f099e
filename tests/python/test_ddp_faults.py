"""Faults in DDP training, each a multi-process run of the trainers of examples/ with a hard
timeout (a hang is a failure): ranks started with different options stop with an error that
names what differs, on every rank."""

import sys

import pytest
import torch.distributed as dist

from ddp_support import CPP_TRAINER, PY_TRAINER, free_port, run_ranks, torchrun_env

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
