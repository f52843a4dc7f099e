import os
import pathlib

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The library under test: the build tree's by default, or an installed one.
LIBRARY = pathlib.Path(os.environ.get("BLOAD_LIBRARY", ROOT / "build" / "libbload.so"))
DATA = ROOT / "examples" / "data"

torch.ops.load_library(str(LIBRARY))


def read_lengths(name):
    with open(DATA / name) as f:
        return [int(line) for line in f if line.strip() and not line.startswith("#")]


@pytest.fixture(scope="session")
def action_genome_lengths():
    return read_lengths("action_genome_like.lengths")
