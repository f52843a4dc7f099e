"""torch.classes.bload.Planner from Python: a DataLoader batch sampler on it, a TorchScript
recurrent model on its packed batches, and the library's exported symbols."""

import pickle
import shutil
import subprocess
import sys

import bload
import pytest
import torch
from conftest import COLUMN, LIBRARY

Planner = torch.classes.bload.Planner


class Sequences(torch.utils.data.Dataset):
    """Sequence i: steps (i * 1000 + t) as one feature, target i at every step."""

    def __init__(self, lengths):
        self.lengths = lengths

    def __len__(self):
        return len(self.lengths)

    def __getitem__(self, index):
        data = (torch.arange(self.lengths[index], dtype=torch.float32) + 1000 * index).unsqueeze(1)
        return data, torch.full((self.lengths[index],), index)


@pytest.mark.parametrize("workers", [0, 2])
def test_data_loader_ranks_get_equal_batches_and_every_sequence_once(
    action_genome_lengths, workers
):
    lengths = action_genome_lengths
    world_size, blocks = 3, 8
    planner = Planner(
        torch.tensor(lengths), 94, blocks_per_batch=blocks, world_size=world_size, seed=3
    )
    seen = torch.zeros(len(lengths), dtype=torch.long)
    counts = []
    for rank in range(world_size):
        sampler = bload.BlockSampler(lengths, 94, blocks, world_size=world_size, rank=rank, seed=3)
        sampler.set_epoch(1)
        loader = torch.utils.data.DataLoader(
            bload.BlockDataset(Sequences(lengths), 94),
            batch_sampler=sampler,
            collate_fn=bload.collate,
            num_workers=workers,
        )
        counts.append(0)
        for batch in loader:
            table, data, target = batch.table, batch.data, batch.target
            counts[-1] += 1
            assert data.shape == (blocks, 94, 1)
            valid = batch.valid
            assert torch.equal(target[valid], (data[..., 0][valid] // 1000).long())
            assert bool((target[~valid] == -100).all())
            seen.index_add_(0, table[:, COLUMN["sequence"]], table[:, COLUMN["length"]])
    assert counts == [counts[0]] * world_size and counts[0] == planner.batches_per_rank(1)
    assert torch.equal(seen, torch.tensor(lengths))


def test_a_batch_with_no_piece_is_padding_only():
    """Three sequences alone in their blocks (pad_to_max) on 2 ranks, a block per batch: rounding
    to 4 blocks leaves rank 0 a batch of one empty block. It comes through the DataLoader as
    padding only, with an int64 table of no row and data and target of the sequences' kind."""
    sampler = bload.BlockSampler([5, 7, 3], 8, world_size=2, rank=0, policy="pad_to_max")
    assert sampler.plan.batch(0, 0).shape == (
        0,
        len(COLUMN),
    )  # the precondition: a batch without a piece
    loader = torch.utils.data.DataLoader(
        bload.BlockDataset(Sequences([5, 7, 3]), 8, data_padding=-1.0),
        batch_sampler=sampler,
        collate_fn=bload.collate,
    )
    empty, full = list(loader)
    assert empty.table.dtype == torch.int64 and empty.table.shape == (0, len(COLUMN))
    assert torch.equal(empty.data, torch.full((1, 8, 1), -1.0))
    assert torch.equal(empty.target, torch.full((1, 8), -100))
    assert not empty.valid.any() and not empty.reset.any()
    assert empty.cu_seqlens.tolist() == [0] and empty.indices.numel() == 0
    # The batch beside it, with a piece, is packed as ever.
    assert (
        full.table.shape == (1, len(COLUMN))
        and int(full.valid.sum()) == full.table[0, COLUMN["length"]]
    )
    assert full.data.dtype == empty.data.dtype and full.target.dtype == empty.target.dtype


def test_planner_stats_hash_and_pickle(action_genome_lengths):
    planner = Planner(torch.tensor(action_genome_lengths), 94, world_size=8)
    stats = planner.stats(0)
    assert stats["steps"] == sum(action_genome_lengths)
    assert stats["blocks"] * 94 - stats["steps"] == stats["padding"]
    assert stats["blocks"] % 8 == 0 and stats["deleted"] == 0
    assert planner.plan_hash(0) != planner.plan_hash(1)
    copy = pickle.loads(pickle.dumps(planner))
    assert copy.plan_hash(1) == planner.plan_hash(1)
    assert torch.equal(copy.batch(1, 7, 3), planner.batch(1, 7, 3))


def test_planner_agreement_names_what_ranks_disagree_on(action_genome_lengths):
    """The fingerprint the batch sampler all-gathers, and its check (the C++ tests cover every
    field; the trainers' multi-process tests the gather)."""
    lengths = torch.tensor(action_genome_lengths[:50])
    mine, other = Planner(lengths, 94, world_size=2), Planner(lengths, 94, world_size=2, seed=3)
    assert mine.agreement(1).dtype == torch.int64
    mine.check_agreement(
        1, torch.stack([mine.agreement(1), Planner(lengths, 94, world_size=2).agreement(1)])
    )
    with pytest.raises(RuntimeError, match="ranks disagree on seed: rank 0 has 0, rank 1 has 3"):
        mine.check_agreement(1, torch.stack([mine.agreement(1), other.agreement(1)]))
    with pytest.raises(RuntimeError, match="ranks disagree on epoch: rank 0 has 1, rank 1 has 2"):
        mine.check_agreement(1, torch.stack([mine.agreement(1), mine.agreement(2)]))
    # Last, the rank each process serves: two serving one rank (each node's processes passing
    # their LOCAL_RANK) would train one rank's share twice and the other's never.
    assert mine.agreement(1)[-1] == -1 and mine.agreement(1, 1)[-1] == 1
    mine.check_agreement(1, torch.stack([mine.agreement(1, 1), mine.agreement(1, 0)]))
    with pytest.raises(
        RuntimeError, match="ranks disagree on rank: processes 0, 1 all serve rank 0"
    ):
        mine.check_agreement(1, torch.stack([mine.agreement(1, 0), mine.agreement(1, 0)]))
    with pytest.raises(RuntimeError, match="rank = 2: expected the rank this process serves"):
        mine.agreement(1, 2)


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda: Planner(torch.tensor([3, -1]), 4), "lengths[1] = -1: expected a length from 1"),
        (
            lambda: Planner(torch.tensor([3, 0]), 4),
            "lengths[1] = 0: expected every sequence to have at least 1 step",
        ),
        (lambda: Planner(torch.tensor([3.0]), 4), "lengths: expected a 1-d integer tensor"),
        (
            lambda: Planner(torch.tensor([3, 9]), 4),
            "t_max = 4: expected at least the longest sequence (9 steps)",
        ),
        (lambda: Planner(torch.tensor([3]), 0), "t_max = 0: expected from 1 to 16777216 steps"),
        (
            lambda: Planner(torch.tensor([3]), 4, policy="tetris"),
            'policy = "tetris": expected best_fit, random_fill, pad_to_max or lanes',
        ),
        (lambda: Planner(torch.tensor([3]), 4, world_size=2), "world_size = 2: expected at most 1"),
        (
            lambda: Planner(torch.tensor([3]), 4, seed=-5),
            "seed = -5: expected from 0 to 9223372036854775807",
        ),
        (lambda: Planner(torch.tensor([3, 1]), 4).batch(-1, 0, 0), "epoch = -1"),
        (
            lambda: Planner(torch.tensor([3, 1]), 4).batch(0, 1, 0),
            "rank = 1: expected a rank below world_size (1)",
        ),
        (
            lambda: Planner(torch.tensor([3, 1]), 4).batch(0, 0, 5),
            "batch = 5: expected a batch index below 1",
        ),
    ],
)
def test_bad_planner_inputs_raise_instead_of_aborting(make, expected):
    with pytest.raises(RuntimeError) as error:
        make()
    assert expected in str(error.value)


OUT_OF_MEMORY = """
import resource, sys, torch
import bload
lengths = torch.randint(1, 100, (50_000_000,), dtype=torch.int64)
with open("/proc/self/status") as status:
    used = next(int(line.split()[1]) for line in status if line.startswith("VmSize")) * 1024
# 60 MB more than this process maps now: the core's 200 MB copy of the lengths cannot fit.
resource.setrlimit(resource.RLIMIT_AS, (used + (60 << 20), resource.RLIM_INFINITY))
try:
    torch.classes.bload.Planner(lengths, 100)
except RuntimeError as error:
    print(str(error).splitlines()[0])
"""


def test_running_out_of_memory_raises_instead_of_aborting():
    # 50M lengths under a memory cap: the interpreter used to abort inside the planner.
    result = subprocess.run(
        [sys.executable, "-c", OUT_OF_MEMORY, str(LIBRARY)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith(
        "memory for the lengths as 32-bit integers = 50000000 elements"
    ), result.stdout


def test_torchscript_gru_on_packed_blocks_equals_each_sequence_alone():
    torch.manual_seed(0)
    lengths = torch.randint(1, 24, (40,))
    planner = Planner(lengths, 24, blocks_per_batch=4, world_size=1, seed=11)
    model = torch.jit.script(bload.nn.PackedGRU(3, 5, 2))  # bload's GRU, resetting per piece
    sequences = [torch.randn(int(n), 3) for n in lengths]
    checked = 0
    for index in range(planner.batches_per_rank(0)):
        table = planner.batch(0, 0, index)
        packed = torch.ops.bload.pack(
            [sequences[s] for s in table[:, COLUMN["sequence"]].tolist()], table, 4, 24, 0.0
        )
        pieces = torch.ops.bload.unpack(model(packed, table), table)
        for row, piece in zip(table.tolist(), pieces):
            # The piece alone, at the start of a block of its own.
            alone_row = [0] * len(COLUMN)
            for name in ("length", "sequence", "sequence_length"):
                alone_row[COLUMN[name]] = row[COLUMN[name]]
            alone = model(
                sequences[row[COLUMN["sequence"]]].unsqueeze(0), torch.tensor([alone_row])
            )
            torch.testing.assert_close(piece, alone[0], rtol=0, atol=1e-5)
            checked += 1
    assert checked == len(lengths)


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs nm")
def test_only_bload_symbols_are_exported():
    symbols = subprocess.run(
        ["nm", "-D", "--defined-only", "--demangle", str(LIBRARY)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for api in (
        "bload::Planner::Planner",
        "bload::BlockSampler::next",
        "bload::pack_into",
        "vtable for bload::BlockSampler",
    ):
        assert api in symbols, api
    # Rust's std, the bridge and cxx's runtime stay inside, and so does the plugin's own code
    # (the bridge's C++ side, the TorchScript class, the autograd functions).
    for hidden in (
        "rust_",
        "std::panicking",
        "cxxbridge",
        "__rust",
        "bload$",
        "bload::ffi",
        "ScriptPlanner",
        "ScriptEpochPlan",
        "PackFunction",
    ):
        assert hidden not in symbols, hidden
