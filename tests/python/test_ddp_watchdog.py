"""The ranks' watchdog (bload.distributed.Liveness, bload::Liveness; docs/ddp.md), through both
trainers of tests/harness/ started by hand as torchrun starts them (rank 0 hosts the store): a rank
stopped with SIGSTOP is named by the other, which stops, within a heartbeat window far shorter
than the collectives' --timeout; a rank started with another world size, and one that failed at
start-up, are named as such on every rank. Each run has a hard timeout well under --timeout, so
a rank left waiting for its collective's timeout fails the test."""

import signal
import time

import bload
import pytest
from ddp_support import TRAINERS, free_port, run_ranks, start, torchrun_env

TIMEOUT = 600  # the collectives' --timeout: no test waits for it
WINDOW = 3  # --heartbeat-window
WAIT = 120  # seconds a test waits for a rank to stop (a hang is a failure)


def trainer(name, *options):
    return [
        str(word)
        for word in [*TRAINERS[name], "--timeout", TIMEOUT, "--heartbeat-window", WINDOW, *options]
    ]


@pytest.mark.parametrize("name", ["cpp", "python"])
@pytest.mark.parametrize("stopped", [1, 0])
def test_a_stopped_rank_is_named_and_the_other_stops(name, stopped, tmp_path):
    """Stops a rank (SIGSTOP) once both train: the other names it, with how long it has been
    silent, and stops with exit status 3 (rank 0 hosts the store: stopped, its store no longer
    answers, which names it too)."""
    command = trainer(
        name, "--sequences", 3000, "--blocks-per-batch", 1, "--step-log", tmp_path / "steps"
    )
    port = free_port()
    processes = [start(command, torchrun_env(rank, 2, port)) for rank in range(2)]
    try:
        deadline = time.monotonic() + WAIT
        # Both ranks past their first batch: training, in step.
        while not all(
            (tmp_path / f"steps.{rank}").exists()
            and (tmp_path / f"steps.{rank}").read_text().count("\n") > 3
            for rank in range(2)
        ):
            assert all(p.poll() is None for p in processes), [p.communicate() for p in processes]
            assert time.monotonic() < deadline, "the ranks did not start training"
            time.sleep(0.05)
        processes[stopped].send_signal(signal.SIGSTOP)
        other = processes[1 - stopped]
        _, stderr = other.communicate(timeout=WAIT)
    finally:
        for p in processes:
            p.kill()  # a stopped process too
            p.wait()
    assert other.returncode == 3, stderr[-3000:]
    named = f"rank {1 - stopped}: stopped: rank {stopped} lost: "
    assert named in stderr, stderr[-3000:]
    line = stderr[stderr.index(named) :].splitlines()[0]
    # How long: no heartbeat (or no answer from the store it hosts) for at least the window.
    seconds = float(line.split(" for ")[-1].split(" s")[0])
    assert seconds >= WINDOW and ("no heartbeat" in line or "its store has not answered" in line), (
        line
    )


@pytest.mark.parametrize("name", ["cpp", "python"])
def test_a_rank_of_another_world_size_is_named_on_every_rank(name):
    port = free_port()
    command = trainer(name, "--sequences", 100)
    results = run_ranks(
        [command, command], [torchrun_env(0, 2, port), torchrun_env(1, 3, port)], timeout=WAIT
    )
    # Each rank names the other's world size: from its watchdog ("rank R: stopped: ..."), or,
    # where the two ranks' first collective ran before it looked (it can: gloo connects the two),
    # from that collective's failure ("rank R: stopped after 1 collectives: ...").
    for rank, (returncode, _, stderr) in enumerate(results):
        assert returncode == 3, stderr[-3000:]
        stopped = [line for line in stderr.splitlines() if line.startswith(f"rank {rank}: stopped")]
        assert stopped, stderr[-3000:]
        assert "ranks disagree on the world size: rank 0 has 2, rank 1 has 3" in stopped[0], stopped


@pytest.mark.parametrize("name", ["cpp", "python"])
def test_a_rank_that_fails_at_start_up_is_named_on_every_rank(name, tmp_path):
    """Rank 1's lengths hold a sequence longer than t_max: it stops on its planner's error, and
    rank 0, waiting for it in a collective, names it and that error (not gloo's lost connection)."""
    long = tmp_path / "long.lengths"
    long.write_text("5\n500\n7\n" * 40)
    port = free_port()
    command = trainer(name, "--sequences", 100)
    results = run_ranks(
        [command, command + ["--lengths", long]],
        [torchrun_env(rank, 2, port) for rank in range(2)],
        timeout=WAIT,
    )
    (status_0, _, stderr_0), (status_1, _, stderr_1) = results
    assert status_1 == 3 and "rank 1: stopped" in stderr_1 and "500" in stderr_1, stderr_1[-3000:]
    own_error = stderr_1[stderr_1.index("rank 1: stopped") :].splitlines()[0].split(": ", 2)[-1]
    assert status_0 == 3, stderr_0[-3000:]
    assert "rank 1 failed at start-up, before the agreement check: " in stderr_0, stderr_0[-3000:]
    assert own_error in stderr_0, (own_error, stderr_0[-3000:])


def test_the_library_names_a_rank_stuck_behind_the_others():
    """Two ranks' Liveness in one process (act=False: the watchdog records, for fault()): rank 1
    beats (alive) but stays at batch 1 while rank 0 goes on to batch 2; within a window rank 0's
    watchdog names it stuck, and rank 1 reads the same from the store."""
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    ranks = [
        bload.distributed.Liveness("127.0.0.1", store.port, rank, 2, window=0.6, act=False)
        for rank in range(2)
    ]
    for liveness in ranks:
        liveness.started()
        liveness.advance()
    ranks[0].advance()
    deadline = time.monotonic() + WAIT
    while not all(liveness.fault() for liveness in ranks):
        assert time.monotonic() < deadline, [liveness.fault() for liveness in ranks]
        time.sleep(0.05)
    for liveness in ranks:
        assert liveness.fault().startswith("rank 1 stuck: alive, but still at batch 1 for "), (
            liveness.fault()
        )
        assert "while rank 0 is at batch 2" in liveness.fault()
    for liveness in ranks:
        liveness.finished()


@pytest.mark.parametrize(
    "arguments, expected",
    [
        (dict(rank=2, world_size=2), "rank = 2: expected a rank from 0 to 1 (world_size = 2)"),
        (dict(rank=0, world_size=2, window=0.01), "window = 10 ms: expected at least 100 ms"),
        (dict(rank=0, world_size=0), "world_size = 0: expected at least 1"),
    ],
)
def test_bad_liveness_arguments_are_named(arguments, expected):
    with pytest.raises(RuntimeError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        bload.distributed.Liveness("127.0.0.1", 1, **arguments)


@pytest.mark.parametrize("store_rank", [2, 5, -2])
def test_a_store_rank_outside_the_world_is_named(store_rank):
    with pytest.raises(ValueError, match=rf"store_rank = {store_rank}: expected -1 .* from 0 to 1"):
        bload.distributed.Liveness("127.0.0.1", 1, 0, 2, store_rank=store_rank)
