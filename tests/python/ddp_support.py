"""What the multi-process tests of the DDP trainers share: the trainers, runs with a hard timeout
(a hang is a failure), and the environment torchrun gives a rank."""

import importlib.util
import json
import os
import pathlib
import socket
import subprocess
import sys

import forked_trainer
import pytest
from conftest import ROOT

# A trainer's process (or one rank's, with torchrun's environment in `env`) started, its outputs
# captured as text: the Python trainer forked from a process that has imported torch, any other
# command with subprocess.Popen.
start = forked_trainer.start

# The C++ harness: this checkout's build, or the one BLOAD_CPP_TRAINER names (as BLOAD_LIBRARY
# names the plugin), so Python-only changes are tested without building the harness again.
CPP_TRAINER = pathlib.Path(
    os.environ.get(
        "BLOAD_CPP_TRAINER", ROOT / "build" / "tests" / "harness" / "cpp" / "ddp_trainer"
    )
)
PY_TRAINER = forked_trainer.TRAINER
TORCHRUN = pathlib.Path(sys.executable).with_name("torchrun")  # the one beside this Python
TRAINERS = {"cpp": [CPP_TRAINER], "python": [sys.executable, PY_TRAINER]}  # their command lines
HARD_TIMEOUT = 240  # seconds; the trainers' own collective timeout is shorter


def example_module(name):
    """examples/NAME.py as a module, for tests of what the examples define (the examples are
    scripts, not a package: their directory stays off sys.path)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(command, timeout=HARD_TIMEOUT):
    """Runs a trainer: its returncode, stdout and stderr; subprocess.TimeoutExpired (a failure)
    if it outlives `timeout`."""
    process = start(command)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def report_of(result):
    """The JSON line a trainer's --json ends with, from a run that succeeded."""
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def run_ranks(commands, envs=None, timeout=HARD_TIMEOUT):
    """Runs one process per command at once and waits for all: (returncode, stdout, stderr) each.
    A process still running after `timeout` is killed, with the others, and fails the test."""
    envs = envs or [None] * len(commands)
    processes = [start(command, env) for command, env in zip(commands, envs)]
    try:
        outputs = [p.communicate(timeout=timeout) for p in processes]
    except subprocess.TimeoutExpired:
        for p in processes:
            p.kill()
        pytest.fail(f"a rank ran past {timeout} s: {[p.communicate() for p in processes]}")
    return [(p.returncode, *output) for p, output in zip(processes, outputs)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(program, log_dir, nodes=1, ranks_per_node=1):
    """The command line of one torchrun node starting `program` (its words) on loopback, at a
    free port (never torchrun's default, which a run beside this one may hold): one node with its
    own store (--master-port), or `nodes` nodes meeting through c10d rendezvous (as machines
    would at --rdzv-endpoint HOST:PORT); start it `nodes` times. Its logs go under `log_dir` (a
    test's tmp_path), not into a torchelastic_* directory of the system's that nothing removes."""
    if nodes == 1:
        meeting = ["--master-addr", "127.0.0.1", "--master-port", free_port()]
    else:
        meeting = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}"]
    command = [TORCHRUN, "--nnodes", nodes, "--nproc-per-node", ranks_per_node, *meeting]
    command += ["--log-dir", log_dir, *program]
    return [str(word) for word in command]


def torchrun_env(rank, world_size, port):
    """The environment torchrun gives a rank (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE,
    LOCAL_RANK), here for ranks started by hand on this machine; rank 0 hosts the store."""
    return dict(
        os.environ,
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
    )
