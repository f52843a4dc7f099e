import errno
import os
import pathlib
import subprocess
import sys

import bload
import numpy as np
import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Every process the tests start (trainer ranks forked, spawned or under torchrun, DataLoader
# workers) prints its Python stack if it dies of a signal: a rank that aborts says where it was.
os.environ.setdefault("PYTHONFAULTHANDLER", "1")
# tests/support (the test data set and test models, shared with the harness) is on this
# process's path by pytest's configuration (pyproject.toml, `pythonpath`), and on the path of every
# process the tests start (torchrun's ranks of tests/harness/ddp_trainer.py) by PYTHONPATH.
SUPPORT = ROOT / "tests" / "support"
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(SUPPORT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
)


def child_env(**variables):
    """The environment of a Python process a test starts that must import what this one does
    (bload under test, the test support): this one's sys.path as its PYTHONPATH, and
    `variables` set."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(map(str, sys.path)), **variables)


def run_python(code, timeout=120):
    """`code` run by this Python in a process of its own with child_env(): its CompletedProcess,
    output captured as text."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=child_env(),
    )


def full_disk_after(budget):
    """An open() whose files' writes fail with ENOSPC once `budget` bytes are written (a full
    disk, without filling one): monkeypatch it over a writer module's `open`."""
    written = [0]

    class File:
        def __init__(self, file):
            self.file = file

        def write(self, data):
            written[0] += len(memoryview(data).cast("B"))
            if written[0] > budget:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return self.file.write(data)

        def __getattr__(self, name):
            return getattr(self.file, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

    return lambda *args, **kwargs: File(open(*args, **kwargs))


# The library under test: the installed package's, or the build named by BLOAD_LIBRARY.
LIBRARY = pathlib.Path(bload.library_path())
DATA = ROOT / "examples" / "data"
# A block table's columns by name: index rows with COLUMN["sequence"], never a bare number.
COLUMN = bload.ops.COLUMN


def read_lengths(name):
    return bload.read_lengths(DATA / name).tolist()


@pytest.fixture(scope="session")
def action_genome_lengths():
    return read_lengths("action_genome_like.lengths")


# The devices the operator tests run on: the CPU, and CUDA where torch sees a GPU (as
# pytorch/extension-cpp's tests are parametrized). `pytest -k cuda` picks the CUDA ones
# (tests/gpu/run.sh).
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


@pytest.fixture(scope="module")
def one_thread():
    """torch on one intra-op thread for a module of tiny models: its two threads spin against
    each other and the suite's builds on a 2-core machine (14x slower here under load)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def store_sequences(count=40, seed=0):
    """40 sequences of 1 to 29 steps: (float32 data [T, 3], int64 target [T])."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        length = int(rng.integers(1, 30))
        out.append(
            (
                rng.standard_normal((length, 3)).astype(np.float32),
                np.arange(length, dtype=np.int64) + i,
            )
        )
    return out


# The items and the store that test_store.py and test_store_faults.py share.
@pytest.fixture
def items():
    return store_sequences()


@pytest.fixture
def store(tmp_path, items):
    return bload.SequenceStore(bload.store.write(tmp_path / "s", items, progress=False))
