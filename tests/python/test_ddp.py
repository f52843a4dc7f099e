"""The DDP trainers of tests/harness/ end to end on gloo: every rank runs the same number of batches,
the naive per-sequence loop hangs where bload's finishes, and the gradients of packed blocks equal
those of the sequences run one at a time. Every run has a hard timeout, so a hang is a failure."""

import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import COLUMN
from ddp_support import (
    CPP_TRAINER,
    PY_TRAINER,
    report_of,
    run,
    run_ranks,
    torchrun,
)
from models import scripted  # tests/support
from running_sum import FEATURES

SEQUENCES = 400  # the first 400 Action-Genome-shaped sequences: a few batches per rank


@pytest.fixture(scope="module")
def script_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "packed_gru.pt"
    scripted("gru", 0).save(str(path))
    return path


def check_epoch(epoch, lengths, world_size):
    """The epoch's figures against the plan: equal batch counts, every step once, its padding."""
    planner = torch.classes.bload.Planner(
        torch.tensor(lengths), 94, blocks_per_batch=8, world_size=world_size
    )
    assert epoch["batches_per_rank"] == [planner.batches_per_rank(0)] * world_size
    assert epoch["frames"] == sum(lengths)
    assert epoch["padding"] == planner.stats(0)["padding"]
    assert 0 <= epoch["last_loss"] < float("inf")


@pytest.fixture(scope="module")
def trained(script_model):
    """trained(trainer, world_size, *more): the report of a run of the C++ trainer ("cpp" with its
    own module, "script" with script_model) or the Python one ("python", script_model) on
    SEQUENCES. A run several tests read (the same command) starts once, for all of them."""
    reports = {}

    def report(trainer, world_size, *more):
        if trainer == "python":
            command = [sys.executable, PY_TRAINER, "--model", script_model]
        else:
            command = [CPP_TRAINER, "--model", "cpp" if trainer == "cpp" else script_model]
        command += ["--world-size", world_size, "--sequences", SEQUENCES, "--timeout", 60]
        key = tuple(str(word) for word in [*command, "--json", *more])
        if key not in reports:
            reports[key] = report_of(run(key))
        return reports[key]

    return report


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("model", ["cpp", "script"])
def test_cpp_trainer_ranks_run_equal_batches(action_genome_lengths, trained, world_size, model):
    report = trained(model, world_size)
    assert report["backend"] == "gloo" and report["world_size"] == world_size
    check_epoch(report["epochs"][0], action_genome_lengths[:SEQUENCES], world_size)


def test_cpp_torchscript_and_python_trainers_train_alike(trained):
    """Same initial weights (the seed) and data: the C++ module, the scripted one in the C++
    trainer and the scripted one under Python's DDP see the same losses."""
    native = trained("cpp", 2)["epochs"][0]
    for other in (trained("script", 2)["epochs"][0], trained("python", 2)["epochs"][0]):
        assert native["first_loss"] == pytest.approx(other["first_loss"], rel=1e-4)
        assert native["last_loss"] == pytest.approx(other["last_loss"], rel=1e-3)


def test_both_trainers_train_alike_from_a_sequence_store(trained, script_model, tmp_path):
    """--store: the sequences Python's trainer writes to a store, packed from it by Python's
    bload.SequenceStore and C++'s bload::SequenceStore, give the losses of the generated ones."""
    generated = trained("python", 2)["epochs"][0]
    stored = trained("python", 2, "--store", tmp_path / "store")["epochs"][0]
    assert (tmp_path / "store" / "header.json").exists()
    cpp = [CPP_TRAINER, "--world-size", 2, "--timeout", 60, "--json", "--model", script_model]
    from_cpp = report_of(run(cpp + ["--store", tmp_path / "store"]))["epochs"][0]
    for epoch in (stored, from_cpp):
        assert (
            epoch["batches_per_rank"] == generated["batches_per_rank"]
            and epoch["frames"] == generated["frames"]
        )
        assert epoch["first_loss"] == pytest.approx(generated["first_loss"], rel=1e-4)
        assert epoch["last_loss"] == pytest.approx(generated["last_loss"], rel=1e-3)


@pytest.mark.parametrize("world_size", [2, 3])
def test_python_trainer_ranks_run_equal_batches(action_genome_lengths, trained, world_size):
    report = trained("python", world_size)
    assert report["backend"] == "gloo" and report["world_size"] == world_size
    check_epoch(report["epochs"][0], action_genome_lengths[:SEQUENCES], world_size)


@pytest.mark.parametrize(
    "trainer, world_size", [("python", 2), ("python", 3), ("cpp", 2), ("cpp", 3)]
)
def test_trainers_carry_lanes_with_equal_batches(
    action_genome_lengths, script_model, trainer, world_size
):
    # 8 rows a rank: every rank's lanes, the TorchScript model's state carried batch to batch.
    command = ([CPP_TRAINER] if trainer == "cpp" else [sys.executable, PY_TRAINER]) + [
        "--world-size",
        world_size,
        "--sequences",
        SEQUENCES,
        "--timeout",
        60,
        "--policy",
        "lanes",
        "--t-max",
        16,
    ]
    report = report_of(run(command + ["--model", script_model, "--json"]))
    assert report["policy"] == "lanes" and report["world_size"] == world_size
    lengths = action_genome_lengths[:SEQUENCES]
    planner = torch.classes.bload.Planner(
        torch.tensor(lengths), 16, blocks_per_batch=8, world_size=world_size, policy="lanes"
    )
    epoch = report["epochs"][0]
    assert epoch["batches_per_rank"] == [planner.batches_per_rank(0)] * world_size
    assert epoch["frames"] == sum(lengths) and epoch["padding"] == planner.stats(0)["padding"]
    assert 0 <= epoch["last_loss"] < epoch["first_loss"]


def torchrun_nodes(nodes, trainer, log_dir):
    """`nodes` torchrun processes of one rank each, meeting through c10d rendezvous on loopback:
    every node's (returncode, stdout, stderr)."""
    return run_ranks([torchrun(trainer, log_dir, nodes=nodes)] * nodes)


def the_report(results):
    """The one JSON report of a run of several processes (rank 0's), all of which succeeded."""
    for returncode, stdout, stderr in results:
        assert returncode == 0, stdout[-2000:] + stderr[-4000:]
    reports = [
        json.loads(line)
        for _, stdout, _ in results
        for line in stdout.splitlines()
        if line.startswith("{")
    ]
    assert len(reports) == 1, reports
    return reports[0]


def test_cpp_trainer_under_torchrun_on_two_nodes(action_genome_lengths, tmp_path):
    """RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT from torchrun, the store torchrun's agent
    hosts: two single-rank nodes train one epoch as the launcher's two ranks do."""
    trainer = ["--no-python", CPP_TRAINER, "--sequences", SEQUENCES, "--timeout", 60, "--json"]
    report = the_report(torchrun_nodes(2, trainer, tmp_path))
    assert report["world_size"] == 2
    check_epoch(report["epochs"][0], action_genome_lengths[:SEQUENCES], 2)


def test_python_trainer_under_torchrun_on_two_nodes(action_genome_lengths, script_model, tmp_path):
    trainer = [
        PY_TRAINER,
        "--sequences",
        SEQUENCES,
        "--timeout",
        60,
        "--model",
        script_model,
        "--json",
    ]
    report = the_report(torchrun_nodes(2, trainer, tmp_path))
    assert report["world_size"] == 2
    check_epoch(report["epochs"][0], action_genome_lengths[:SEQUENCES], 2)


@pytest.mark.parametrize(
    "env, flags, expected",
    [
        ({"RANK": "0"}, [], 'WORLD_SIZE = "": expected set where RANK is'),
        (
            {"RANK": "x", "WORLD_SIZE": "2"},
            [],
            'RANK = "x": expected an integer from 0 to 9223372036854775807',
        ),
        (
            {"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"},
            [],
            'RANK = "2": expected less than the world size 2',
        ),
        (
            {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "70000"},
            [],
            'MASTER_PORT = "70000": expected a port from 1 to 65535',
        ),
        (
            {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"},
            ["--world-size", 3],
            '--world-size = "3": expected WORLD_SIZE = 2 under torchrun',
        ),
    ],
)
def test_cpp_trainer_names_a_bad_torchrun_environment(env, flags, expected):
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    }
    result = subprocess.run(
        [str(CPP_TRAINER), *map(str, flags)],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1 and expected in result.stderr, result.stderr


@pytest.mark.skipif(torch.version.cuda is None, reason="torch is not a CUDA build")
def test_cpp_trainer_is_built_with_nccl_for_a_cuda_torch():
    # `make` builds the CUDA variant wherever torch is a CUDA build, GPU or not (examples/cpp).
    usage = subprocess.run([str(CPP_TRAINER), "--help"], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 0 and "NCCL on CUDA, gloo on CPU" in usage.stdout, usage.stdout


TOO_MANY_RANKS = "world_size * blocks_per_batch = 800 (100 x 8): expected at most 5"


@pytest.mark.parametrize(
    "trainer, flags, status, expected",
    [
        # Refused before any rank starts: a launcher that started them would fork 100,000 processes.
        (
            "cpp",
            ["--world-size", 100000],
            1,
            '--world-size = "100000": expected at most 1024 ranks',
        ),
        ("cpp", ["--world-size", 100, "--sequences", 5], 1, TOO_MANY_RANKS),
        (
            "cpp",
            ["--model", __file__],
            1,
            f'--model = "{__file__}": expected cpp or a TorchScript file',
        ),
        (
            "cpp",
            ["--epochs", "99999999999999999999"],
            1,
            "expected an integer from 1 to 9223372036854775807",
        ),
        ("python", ["--world-size", 100, "--sequences", 5], 1, TOO_MANY_RANKS),
        (
            "python",
            ["--sequences", -1],
            2,
            "argument --sequences: '-1': expected an integer of at least 1",
        ),
        (
            "python",
            ["--model", "transformer", "--policy", "lanes"],
            2,
            "--policy = 'lanes' with --model = 'transformer': expected a recurrent model",
        ),
        (
            "python",
            ["--model", "transformer", "--attention", "flex", "--device", "cpu"],
            2,
            "--attention = 'flex' on the CPU: flex_attention has no CPU backward",
        ),
    ],
)
def test_trainers_refuse_bad_runs_before_starting_ranks(trainer, flags, status, expected):
    command = [CPP_TRAINER] if trainer == "cpp" else [sys.executable, PY_TRAINER]
    result = run([*command, *flags], timeout=60)
    assert result.returncode == status and expected in result.stderr, result.stderr[-3000:]


def test_naive_per_sequence_loop_hangs_where_bload_finishes(action_genome_lengths):
    lengths = action_genome_lengths[:24]
    # The precondition of the hang: the ranks' sequences (dealt out in turn) differ in frames.
    assert sum(lengths[0::2]) != sum(lengths[1::2])
    command = [CPP_TRAINER, "--world-size", 2, "--sequences", len(lengths), "--timeout", 5]
    naive = run(command + ["--loop", "naive"])
    assert naive.returncode != 0
    assert "Timed out" in naive.stderr or "timeout" in naive.stderr, naive.stderr[-2000:]
    packed = run(command + ["--json"])
    check_epoch(report_of(packed)["epochs"][0], lengths, 2)


def packed_and_alone_gradients(model, lengths, seed):
    """Gradients of a summed squared error on one packed batch, and the sum of the gradients of
    the same sequences run one at a time."""
    generator = torch.Generator().manual_seed(seed)
    planner = torch.classes.bload.Planner(torch.tensor(lengths), 24, blocks_per_batch=4, seed=seed)
    table = planner.batch(0, 0, 0)
    sequences = {
        int(s): torch.randn(int(lengths[s]), FEATURES, generator=generator)
        for s in table[:, COLUMN["sequence"]]
    }
    targets = {s: torch.randn(x.size(0), 1, generator=generator) for s, x in sequences.items()}
    rows = table[:, COLUMN["sequence"]].tolist()

    def gradients(loss):
        model.zero_grad()
        loss.backward()
        return [p.grad.clone() for p in model.parameters()]

    data = torch.ops.bload.pack([sequences[s] for s in rows], table, 4, 24, 0.0)
    target = torch.ops.bload.pack([targets[s] for s in rows], table, 4, 24, 0.0)
    valid = torch.ops.bload.valid_mask(table, 4, 24).unsqueeze(2)
    packed = gradients(((model(data, table) - target).pow(2) * valid).sum())

    alone = [torch.zeros_like(g) for g in packed]
    for s in rows:
        n = sequences[s].size(0)
        single = torch.tensor([[0, 0, n, s, 0, n]])
        loss = (model(sequences[s].unsqueeze(0), single) - targets[s].unsqueeze(0)).pow(2).sum()
        alone = [a + g for a, g in zip(alone, gradients(loss))]
    return packed, alone, len(rows)


def test_packed_gradients_equal_the_sum_over_sequences_run_alone():
    model = scripted("gru", 0)
    lengths = [
        int(n) for n in torch.randint(1, 24, (60,), generator=torch.Generator().manual_seed(5))
    ]
    packed, alone, pieces = packed_and_alone_gradients(model, lengths, seed=5)
    assert pieces > 4  # the batch really packs several sequences per block
    for p, a in zip(packed, alone):
        torch.testing.assert_close(p, a, rtol=1e-5, atol=1e-5)
