"""Faults in DDP training, each a multi-process run of the trainers of tests/harness/ with a hard
timeout (a hang is a failure): ranks started with different options stop with an error that
names what differs, on every rank; a rank whose batch holds no piece trains on (loss 0, valid
JSON); a rank killed mid-epoch is named by the others, which stop, and a run resumed from the last
checkpoint trains every step of the epoch exactly once."""

import collections
import json
import math
import multiprocessing
import os
import signal
import sys
import time

import pytest
import torch
import torch.distributed as dist
from ddp_support import (
    CPP_TRAINER,
    HARD_TIMEOUT,
    PY_TRAINER,
    TRAINERS,
    free_port,
    run,
    run_ranks,
    start,
    torchrun_env,
)
from rank_exit import exit_without_teardown

SEQUENCES = 100  # the first 100 Action-Genome-shaped sequences: a batch or two per rank
# The runs killed mid-epoch: with 2 blocks a batch on 3 ranks, about 30 batches per rank, the kill
# at the 6th or 7th (just past the first checkpoint) and the rest trained after the resume.
KILLED_SEQUENCES = 750
LANES_SEQUENCES = 150  # with --t-max 16 on 4 lanes: about 50 batches, killed at the 6th or 7th


# One rank started with another seed, or another t_max: both still make a valid plan, so
# without the check they would train (each its own plan) and report success.
DISAGREEMENTS = [
    (["--seed", "1"], "ranks disagree on seed: rank 0 has 0, rank 1 has 1"),
    (["--t-max", "120"], "ranks disagree on t_max: rank 0 has 94, rank 1 has 120"),
]


@pytest.mark.parametrize("other, expected", DISAGREEMENTS)
def test_cpp_trainer_ranks_that_disagree_stop_naming_the_field(other, expected):
    # The ranks by hand (--rank, --port) at a store this test hosts, as the launcher would.
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    command = [CPP_TRAINER, "--world-size", 2, "--sequences", SEQUENCES, "--timeout", 60]
    command += ["--port", store.port]
    results = run_ranks([command + ["--rank", 0], command + ["--rank", 1] + other])
    for rank, (returncode, _, stderr) in enumerate(results):
        assert returncode == 3, stderr[-2000:]
        assert (
            f"rank {rank}: stopped after 1 collectives: bload::check_agreement: {expected}"
            in stderr
        ), stderr[-2000:]


@pytest.mark.parametrize("other, expected", DISAGREEMENTS)
def test_python_trainer_ranks_that_disagree_stop_naming_the_field(other, expected):
    port = free_port()
    command = [sys.executable, PY_TRAINER, "--sequences", SEQUENCES, "--timeout", 60]
    results = run_ranks(
        [command, command + other], [torchrun_env(rank, 2, port) for rank in range(2)]
    )
    for rank, (returncode, _, stderr) in enumerate(results):
        assert returncode == 3, stderr[-2000:]
        assert f"rank {rank}: stopped: bload::check_agreement: {expected}" in stderr, stderr[-2000:]


def serve_rank_zero(rank, store, out):
    """A gloo rank whose sampler is told rank=0 whatever its own, as when each node's processes
    pass their LOCAL_RANK as the rank: its error, or "trained", written to out/RANK."""
    import bload

    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{store}", world_size=2, rank=rank
    )
    try:
        sampler = bload.BlockSampler(list(range(1, 13)), 12, world_size=2, rank=0)
        outcome = "trained" if list(sampler) else "no batches"
    except RuntimeError as error:
        outcome = str(error)
    finally:
        torch.distributed.destroy_process_group()
    (out / str(rank)).write_text(outcome)
    exit_without_teardown()  # as a gloo rank must (rank_exit.py)


def test_two_processes_serving_one_rank_stop_naming_it(tmp_path):
    """Every other field of the agreement alike, the ranks served differ: each process names the
    rank both serve, rather than training half of the sequences twice and half never."""
    context = multiprocessing.get_context("spawn")
    ranks = [
        context.Process(target=serve_rank_zero, args=(rank, tmp_path / "store", tmp_path))
        for rank in range(2)
    ]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join(timeout=HARD_TIMEOUT)
    for process in ranks:
        if process.is_alive():
            process.kill()
    assert [process.exitcode for process in ranks] == [0, 0]
    for rank in range(2):
        outcome = (tmp_path / str(rank)).read_text()
        assert "ranks disagree on rank: processes 0, 1 all serve rank 0" in outcome, outcome


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
    planner = torch.classes.bload.Planner(
        torch.tensor(lengths), 94, world_size=2, policy="pad_to_max"
    )
    tables = [
        planner.batch(0, rank, index)
        for rank in range(2)
        for index in range(planner.batches_per_rank(0))
    ]
    assert min(len(table) for table in tables) == 0  # the precondition: a batch without a piece
    options = ["--world-size", 2, "--sequences", 3, "--policy", "pad_to_max", "--timeout", 60]
    result = run(TRAINERS[trainer] + options + ["--blocks-per-batch", 1, "--json"])
    assert result.returncode == 0, result.stderr[-4000:]
    epoch = strict_json(result.stdout.strip().splitlines()[-1])["epochs"][0]
    assert epoch["batches_per_rank"] == [planner.batches_per_rank(0)] * 2
    assert epoch["frames"] == sum(lengths) and epoch["padding"] == planner.stats(0)["padding"]
    assert all(
        math.isfinite(epoch[key]) for key in ("first_loss", "last_loss", "loader_wait_share")
    )


def step_log_runs(path):
    """One rank's step log: its runs, each ((epoch, batch) it started from, [(epoch, batch,
    sequence, offset, length), ...]). A line cut short by the kill is no line. A run that resumed
    an epoch saved on another world size starts from the batch where the saved run stood."""
    runs = []
    if not path.exists():
        return runs
    with open(path) as log:
        for line in log:
            if not line.endswith("\n"):
                break
            if line.startswith("# run:"):
                words = line.split()
                origin = int(words[-1].rstrip(")")) if "(the plan for" in line else int(words[10])
                runs.append(((int(words[8]), origin), []))
            else:
                runs[-1][1].append(tuple(map(int, line.split())))
    return runs


def trained_pieces(runs):
    """The pieces a rank trained, by the definition in tests/harness/cpp/ddp_trainer/checkpoint.h: the
    lines of each run before the point the next run resumed from (the batches its checkpoint
    holds); those at or after it were lost with the run, and trained again by the next."""
    kept = []
    for (_, lines), following in zip(runs, runs[1:] + [None]):
        kept += [line for line in lines if following is None or line[:2] < following[0]]
    return kept


def assert_every_step_once(pieces, lengths):
    """The pieces (epoch, batch, sequence, offset, length) cover each sequence's steps exactly
    once: no step missed, none trained twice."""
    by_sequence = collections.defaultdict(list)
    for _, _, sequence, offset, length in pieces:
        by_sequence[sequence].append((offset, length))
    assert sorted(by_sequence) == list(range(len(lengths)))
    for sequence, steps in enumerate(lengths):
        covered = 0
        for offset, length in sorted(by_sequence[sequence]):
            assert offset == covered, (
                f"sequence {sequence}: steps {covered}.. then a piece at {offset}"
            )
            covered += length
        assert covered == steps, f"sequence {sequence}: {covered} of {steps} steps"


EVERY = 5  # batches between checkpoints


def checkpointed(trainer, tmp_path, *options):
    """The trainer's command line with `options`, a checkpoint every EVERY batches in
    tmp_path/checkpoint and a step log in tmp_path/steps.RANK."""
    recovery = ["--checkpoint", tmp_path / "checkpoint", "--checkpoint-every", EVERY]
    recovery += ["--step-log", tmp_path / "steps", "--timeout", 60]
    return [*TRAINERS[trainer], *options, *recovery]


def kill_mid_epoch_then_resume(
    command, world_size, killed_rank, tmp_path, resume_world_size=None, resume_options=()
):
    """Runs `command` (a trainer with --checkpoint and --step-log in tmp_path) on `world_size`
    ranks started by hand, and kills `killed_rank` with SIGKILL just past a checkpoint: its log
    holds a batch or two after one (the batch a checkpoint follows is a multiple of EVERY). Then
    runs it again with --resume and `resume_options`, to the end of the epoch. Returns every
    rank's (returncode, stdout, stderr) of both runs, and every rank's step log runs."""
    port = free_port()
    processes = [start(command, torchrun_env(rank, world_size, port)) for rank in range(world_size)]
    log, checkpoint = tmp_path / f"steps.{killed_rank}", tmp_path / "checkpoint" / "checkpoint.pt"
    deadline = time.monotonic() + HARD_TIMEOUT
    try:
        while True:
            runs = step_log_runs(log)
            last = runs[-1][1][-1][1] if runs and runs[-1][1] else 0
            if checkpoint.exists() and last > EVERY and last % EVERY in (1, 2):
                break
            assert all(p.poll() is None for p in processes), (
                "the ranks ended before the kill: make the epoch longer"
            )
            assert time.monotonic() < deadline, "no checkpoint, or no training past it"
            time.sleep(0.005)
        os.kill(processes[killed_rank].pid, signal.SIGKILL)
        outputs = [p.communicate(timeout=HARD_TIMEOUT) for p in processes]
    finally:
        for p in processes:
            p.kill()
    killed = [(p.returncode, *output) for p, output in zip(processes, outputs)]
    port = free_port()
    ranks = resume_world_size or world_size
    resumed = run_ranks(
        [command + ["--resume", *resume_options]] * ranks,
        [torchrun_env(rank, ranks, port) for rank in range(ranks)],
    )
    return (
        killed,
        resumed,
        [step_log_runs(tmp_path / f"steps.{rank}") for rank in range(max(world_size, ranks))],
    )


# Rank 1, or rank 0, which hosts the ranks' store here (started by hand, as torchrun without its
# agent store): its loss takes the store with it, and the others tell so.
@pytest.mark.parametrize("trainer, killed_rank", [("cpp", 1), ("cpp", 0), ("python", 1)])
def test_a_rank_killed_mid_epoch_is_named_and_the_resumed_run_trains_every_step_once(
    trainer, killed_rank, tmp_path, action_genome_lengths
):
    world_size = 3
    options = ["--sequences", KILLED_SEQUENCES, "--blocks-per-batch", 2, "--json"]
    command = checkpointed(trainer, tmp_path, *options)
    killed, resumed, logs = kill_mid_epoch_then_resume(command, world_size, killed_rank, tmp_path)

    # Every other rank stops (within the hard timeout: long before its own), naming the lost one.
    for rank, (returncode, _, stderr) in enumerate(killed):
        if rank == killed_rank:
            assert returncode == -signal.SIGKILL
            continue
        assert returncode == 3, stderr[-3000:]
        assert f"rank {rank}: stopped" in stderr and f"rank {killed_rank} lost" in stderr, stderr[
            -3000:
        ]

    for returncode, _, stderr in resumed:
        assert returncode == 0, stderr[-3000:]
    epoch = json.loads(resumed[0][1].strip().splitlines()[-1])["epochs"][0]
    start = (0, epoch["first_batch"])
    # Every rank resumed from the last checkpoint, mid-epoch.
    assert [[point for point, _ in runs] for runs in logs] == [[(0, 0), start]] * world_size
    assert start[1] > 0 and start[1] % EVERY == 0
    # The killed run had logged batches after its checkpoint: trained again, their lines discarded.
    assert any(line[:2] >= start for line in logs[killed_rank][0][1])
    assert_every_step_once(
        [piece for runs in logs for piece in trained_pieces(runs)],
        action_genome_lengths[:KILLED_SEQUENCES],
    )
    # The resumed run trained what its log says, the rest of the epoch.
    planner = torch.classes.bload.Planner(
        torch.tensor(action_genome_lengths[:KILLED_SEQUENCES]),
        94,
        blocks_per_batch=2,
        world_size=world_size,
    )
    assert epoch["batches_per_rank"] == [planner.batches_per_rank(0) - start[1]] * world_size
    assert epoch["frames"] == sum(line[4] for runs in logs for line in runs[1][1])


@pytest.mark.parametrize("trainer", ["cpp", "python"])
def test_a_checkpoint_of_other_options_is_refused_naming_them(trainer, tmp_path):
    """--resume with another seed than the checkpoint's: no rank trains from a position that
    means nothing under this run's plan; each stops naming the option."""
    command = TRAINERS[trainer] + ["--world-size", 2, "--sequences", SEQUENCES, "--timeout", 60]
    command += ["--checkpoint", tmp_path, "--checkpoint-every", 1]
    run(command, timeout=HARD_TIMEOUT).check_returncode()
    assert (tmp_path / "checkpoint.pt").exists()
    result = run(command + ["--resume", "--seed", 1], timeout=HARD_TIMEOUT)
    assert result.returncode != 0
    expected = (
        "'bload_sampler.seed' = 0: expected 1 as this sampler has"
        if trainer == "cpp"
        else "was saved with seed = 0: expected 1"
    )
    assert expected in result.stderr, result.stderr[-3000:]


@pytest.mark.parametrize(
    "flags, expected",
    [
        (
            ["--resume"],
            '--checkpoint = "": expected a directory with --checkpoint-every or --resume',
        ),
        (
            ["--checkpoint-every", 5],
            '--checkpoint = "": expected a directory with --checkpoint-every or --resume',
        ),
        (
            ["--checkpoint-every", -1, "--checkpoint", "x"],
            '--checkpoint-every = "-1": expected an integer from 0 to 9223372036854775807',
        ),
        (
            ["--loop", "naive", "--step-log", "x"],
            '--loop = "naive": expected bload with --checkpoint or --step-log',
        ),
    ],
)
def test_cpp_trainer_names_bad_recovery_options(flags, expected):
    result = run([CPP_TRAINER, *flags], timeout=60)
    assert result.returncode == 1 and expected in result.stderr, result.stderr


@pytest.mark.parametrize("trainer", ["cpp", "python"])
def test_a_run_resumed_on_fewer_ranks_trains_every_step_once(
    trainer, tmp_path, action_genome_lengths
):
    """3 ranks, one killed mid-epoch; the job goes on from the last checkpoint on 2 ranks (the
    sampler re-deals the blocks not yet trained, padding the last global batch): every step of
    the epoch is trained exactly once, and the 2 ranks run equal batch counts."""
    options = ["--sequences", KILLED_SEQUENCES, "--blocks-per-batch", 2, "--json"]
    command = checkpointed(trainer, tmp_path, *options)
    _, resumed, logs = kill_mid_epoch_then_resume(command, 3, 1, tmp_path, resume_world_size=2)
    for returncode, _, stderr in resumed:
        assert returncode == 0, stderr[-3000:]
    epoch = json.loads(resumed[0][1].strip().splitlines()[-1])["epochs"][0]
    # The 2 ranks resumed the 3-rank plan where its checkpoint stood, mid-epoch; rank 2 did not.
    starts = [runs[1][0] for runs in logs[:2]]
    assert starts[0] == starts[1] and starts[0][1] > 0 and starts[0][1] % EVERY == 0
    assert len(logs[2]) == 1
    assert epoch["batches_per_rank"][0] == epoch["batches_per_rank"][1] > 0
    # Rank 2 has no run after the kill: its lines count up to where the others resumed.
    pieces = trained_pieces(logs[0]) + trained_pieces(logs[1])
    pieces += [line for line in logs[2][0][1] if line[:2] < starts[0]]
    assert_every_step_once(pieces, action_genome_lengths[:KILLED_SEQUENCES])


def final_state(trainer, checkpoint):
    """The tensors a trainer's checkpoint holds that the rest of training depends on: the model's
    parameters and every lane's recurrent state, by name."""
    if trainer == "cpp":  # a torch::serialize archive: a TorchScript module of its values
        return torch.jit.load(checkpoint).state_dict()
    saved = torch.load(checkpoint, weights_only=False)
    return {**saved["model"], "lane_state": saved["position"]["lane_state"]}


@pytest.mark.parametrize("trainer", ["cpp", "python"])
def test_a_lanes_run_killed_mid_epoch_resumes_exactly(trainer, tmp_path):
    """Lanes carry the model's state from batch to batch: a run killed mid-epoch and resumed from
    its checkpoint (the sampler's position and every lane's state) ends with the weights and lane
    states of the same run left alone, as if it had never stopped."""
    options = ["--sequences", LANES_SEQUENCES, "--t-max", 16, "--blocks-per-batch", 2]
    options += ["--policy", "lanes"]
    options += ["--timeout", 60, "--checkpoint-every", 1]
    command = TRAINERS[trainer]
    reference = tmp_path / "reference"
    port = free_port()
    alone = run_ranks(
        [command + options + ["--checkpoint", reference]] * 2,
        [torchrun_env(rank, 2, port) for rank in range(2)],
    )
    assert [returncode for returncode, _, _ in alone] == [0, 0], alone[0][2][-3000:]

    killed_options = options + ["--checkpoint", tmp_path / "checkpoint"]
    killed_options += ["--step-log", tmp_path / "steps"]
    killed, resumed, logs = kill_mid_epoch_then_resume(command + killed_options, 2, 1, tmp_path)
    assert killed[1][0] == -signal.SIGKILL
    assert [returncode for returncode, _, _ in resumed] == [0, 0], resumed[0][2][-3000:]
    assert logs[0][1][0][1] > 0  # the second run resumed mid-epoch

    expected = final_state(trainer, reference / "checkpoint.pt")
    got = final_state(trainer, tmp_path / "checkpoint" / "checkpoint.pt")
    assert expected.keys() == got.keys() and "lane_state" in got
    for name, tensor in expected.items():
        # Same operations on the same values: equal up to the last bits of an all-reduce.
        message = f"{name}: {{}}"
        torch.testing.assert_close(got[name], tensor, rtol=0, atol=1e-6, msg=message.format)


@pytest.mark.parametrize("trainer", ["cpp", "python"])
def test_a_lanes_run_resumes_on_other_factors_of_its_lane_count(
    trainer, tmp_path, action_genome_lengths
):
    """4 lanes as 2 ranks of 2 rows, one killed mid-epoch; the job goes on as 1 rank of 4 rows
    from the same batch, each lane from its checkpointed state: every step of the epoch is trained
    exactly once."""
    sequences = LANES_SEQUENCES
    command = checkpointed(trainer, tmp_path, "--sequences", sequences, "--t-max", 16)
    command += ["--policy", "lanes"]
    _, resumed, logs = kill_mid_epoch_then_resume(
        command + ["--blocks-per-batch", 2],
        2,
        1,
        tmp_path,
        resume_world_size=1,
        resume_options=["--blocks-per-batch", 4],
    )
    assert resumed[0][0] == 0, resumed[0][2][-3000:]
    start = logs[0][1][0]
    assert start[1] > 0 and start[1] % EVERY == 0  # rank 0 went on mid-epoch, from the checkpoint
    assert len(logs[1]) == 1  # rank 1 is gone: its lines count up to where rank 0 went on
    pieces = trained_pieces(logs[0]) + [line for line in logs[1][0][1] if line[:2] < start]
    assert_every_step_once(pieces, action_genome_lengths[:sequences])
