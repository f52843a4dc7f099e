"""Plans shared on a node (docs/shared_plans.md): the rank of local rank 0 plans each epoch into a
file that every local rank maps. The batches served are the private plan's (a resumed epoch's
too), no rank keeps lengths of its own once it serves, a damaged or foreign file is refused by
name, and ranks in separate processes meet at the file."""

import multiprocessing
import pathlib
import threading

import bload
import pytest
import torch

LENGTHS = [1 + (i * 7919) % 97 for i in range(3000)]
WORLD = 4


def sampler(rank, directory=None, local_rank=None, lengths=LENGTHS, seed=3, **options):
    options = {"world_size": WORLD, "shared_plan_timeout": 20.0, **options}
    return bload.BlockSampler(
        lengths,
        128,
        2,
        rank=rank,
        seed=seed,
        shared_plan_dir=directory,
        local_rank=rank if local_rank is None else local_rank,
        **options,
    )


def tables(sampler, epoch):
    sampler.set_epoch(epoch)
    return [batch.table.tolist() for batch in sampler]


@pytest.mark.parametrize("policy", ["best_fit", "lanes"])
def test_every_rank_serves_the_private_plans_batches(tmp_path, policy):
    shared = [sampler(rank, tmp_path, policy=policy) for rank in range(WORLD)]
    private = [sampler(rank, policy=policy) for rank in range(WORLD)]
    for epoch in (0, 1):
        for mine, theirs in zip(shared, private):
            assert tables(mine, epoch) == tables(theirs, epoch)
            assert mine.plan.shared() and not theirs.plan.shared()
            assert mine.plan_hash() == theirs.plan_hash()
            assert mine.stats() == theirs.stats()
    files = sorted(path.name for path in tmp_path.iterdir())
    assert len(files) == 2 and all(name.endswith(".plan") for name in files), files


def test_one_planner_used_from_threads_while_it_maps_shared_plans(tmp_path):
    # map_shared_plan replaces the planner's lengths with the file's while other threads plan,
    # pickle and count with it (torch releases the GIL in a class's methods): every answer is
    # the one a planner alone gives. A smoke test: the race it guards against (a copy of the
    # planner's handle beside its replacement) is rare in any one run.
    planner = torch.classes.bload.Planner(torch.tensor(LENGTHS), 128, 2, WORLD, 3)
    alone = torch.classes.bload.Planner(torch.tensor(LENGTHS), 128, 2, WORLD, 3)
    planner.write_shared_plan(0, str(tmp_path))
    expected = (alone.plan_hash(1), alone.__getstate__()[0][0].tolist(), alone.num_sequences())
    failures = []

    def use():
        try:
            for _ in range(30):
                got = (planner.plan(1).plan_hash(), planner.__getstate__()[0][0].tolist())
                assert got + (planner.num_sequences(),) == expected
        except Exception as error:  # reported by the main thread
            failures.append(error)

    threads = [threading.Thread(target=use) for _ in range(3)]
    for thread in threads:
        thread.start()
    for _ in range(30):
        assert planner.map_shared_plan(0, str(tmp_path), 20.0).shared()
    for thread in threads:
        thread.join(timeout=120)
        assert not thread.is_alive()
    assert failures == []


def test_a_rank_holds_no_plan_of_its_own(tmp_path):
    shared, private = sampler(1, tmp_path, local_rank=0), sampler(1)
    # Counted by the core's allocations, not read from the resident set.
    assert shared.plan.private_bytes() == 0
    assert private.plan.private_bytes() >= 4 * len(LENGTHS)
    assert shared.private_bytes() < private.private_bytes()


def test_the_writer_and_readers_hold_at_most_a_byte_a_sequence(tmp_path):
    # The writer plans from its lengths, then keeps the file's: from epoch 0 on it holds, like
    # the readers, only its planner's per-length tables (LENGTHS are short: a few hundred bytes).
    writer, reader = sampler(0, tmp_path), sampler(1, tmp_path)
    private = sampler(0)
    assert private.private_bytes() >= 8 * len(LENGTHS)
    for epoch in (0, 1, 2):
        for rank in (writer, reader):
            rank.set_epoch(epoch)
            assert rank.plan.shared()
            assert rank.private_bytes() <= len(LENGTHS), (epoch, rank.private_bytes())
        assert tables(writer, epoch) == tables(private, epoch)


@pytest.mark.parametrize("world", [WORLD, 3])
def test_a_resumed_epoch_is_served_from_the_file(tmp_path, world):
    saved = sampler(0)
    saved.set_epoch(1)
    batches = iter(saved)
    next(batches), next(batches)
    state = saved.state_dict()
    # Loaded on the same world size (the epoch's own file) and on another (the rest re-dealt,
    # in a file of the position's).
    shared = [sampler(rank, tmp_path, world_size=world) for rank in range(world)]
    private = [sampler(rank, world_size=world) for rank in range(world)]
    for mine, theirs in zip(shared, private):
        mine.load_state_dict(state)
        theirs.load_state_dict(state)
        assert mine.plan.shared() and not theirs.plan.shared()
        assert mine.private_bytes() <= len(LENGTHS)
        assert (len(mine), mine.plan_hash()) == (len(theirs), theirs.plan_hash())
        assert [b.table.tolist() for b in mine] == [b.table.tolist() for b in theirs]
        assert mine.state_dict() == theirs.state_dict()
    assert any("-resume-" in path.name for path in tmp_path.iterdir()) == (world != WORLD)


def test_a_damaged_file_is_refused_by_name(tmp_path):
    sampler(0, tmp_path)
    (path,) = tmp_path.iterdir()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(RuntimeError, match=r"shared plan file .*\.plan \(checksum of the"):
        sampler(1, tmp_path)


def test_a_file_of_other_lengths_is_refused_by_name_or_by_the_agreement(tmp_path):
    sampler(0, tmp_path, lengths=LENGTHS[:-1])
    # A rank that holds its lengths checks the file against them.
    planner = torch.classes.bload.Planner(
        torch.tensor(LENGTHS), 128, blocks_per_batch=2, world_size=WORLD, seed=3
    )
    with pytest.raises(RuntimeError, match=r"shared plan file .*\.plan \(lengths\)"):
        planner.map_shared_plan(0, str(tmp_path), 1.0)
    # A reader takes the file's lengths: the agreement check tells them from another rank's.
    reader, other = sampler(1, tmp_path), sampler(2)
    assert reader.planner.num_sequences() == len(LENGTHS) - 1
    rows = [reader.planner.agreement(0)] + [other.planner.agreement(0)] * (WORLD - 1)
    gathered = torch.stack(rows)
    with pytest.raises(RuntimeError, match="lengths"):
        reader.planner.check_agreement(0, gathered)


def test_a_writer_that_never_comes_is_named_after_the_timeout(tmp_path):
    with pytest.raises(RuntimeError, match=r"shared plan file .*\.plan \(missing\).*timeout"):
        sampler(1, tmp_path, shared_plan_timeout=0.2)


def test_bad_options_are_named(tmp_path):
    with pytest.raises(ValueError, match="shared_plan_dir"):
        sampler(0, tmp_path / "absent")
    with pytest.raises(ValueError, match="shared_plan_timeout"):
        sampler(0, tmp_path, shared_plan_timeout=-1)
    with pytest.raises(ValueError, match="local_rank"):
        sampler(0, tmp_path, local_rank=-1)


def _rank(rank, directory, out):
    """One rank of a node in a process of its own: its batches and what it holds."""
    mine = sampler(rank, directory)
    out.put((rank, tables(mine, 0), mine.plan.shared(), mine.plan.private_bytes()))


def test_ranks_in_processes_meet_at_one_file(tmp_path):
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    # Readers first: they wait for the writer, which starts last.
    processes = [
        context.Process(target=_rank, args=(rank, str(tmp_path), out))
        for rank in reversed(range(WORLD))
    ]
    for process in processes:
        process.start()
    results = {}
    for _ in processes:
        rank, batches, shared, private_bytes = out.get(timeout=120)
        results[rank] = (batches, shared, private_bytes)
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    for rank in range(WORLD):
        batches, shared, private_bytes = results[rank]
        assert shared and private_bytes == 0
        assert batches == tables(sampler(rank), 0)
    assert len(list(pathlib.Path(tmp_path).iterdir())) == 1


@pytest.mark.parametrize("timeout", [float("inf"), 1e300, float("nan")])
def test_a_timeout_of_no_finite_seconds_is_named(tmp_path, timeout):
    with pytest.raises(
        ValueError, match="shared_plan_timeout = .*: expected a finite number of seconds"
    ):
        sampler(0, tmp_path, shared_plan_timeout=timeout)


def test_the_operators_refuse_a_timeout_past_the_same_bound(tmp_path):
    # The sampler's bound is the core's: the operator (C++'s path) refuses just past it, naming it.
    from bload._shared_plan import _MAX_TIMEOUT

    planner = torch.classes.bload.Planner(torch.tensor(LENGTHS), 128, world_size=WORLD)
    bound = f"from 0 to {_MAX_TIMEOUT:.0f}"
    for timeout in (_MAX_TIMEOUT * 1.0001, 1e19, float("inf")):
        with pytest.raises(RuntimeError, match=f"shared_plan_timeout = .*{bound}"):
            planner.map_shared_plan(0, str(tmp_path), timeout)


@pytest.mark.parametrize("value", ["abc", "-2"])  # -2 was named as the argument local_rank
def test_a_local_rank_of_the_environment_that_is_no_int_is_named(tmp_path, monkeypatch, value):
    monkeypatch.setenv("LOCAL_RANK", value)
    with pytest.raises(ValueError, match=f"LOCAL_RANK = '{value}' \\(the environment's"):
        bload.BlockSampler([3, 4, 5], t_max=8, shared_plan_dir=tmp_path)
