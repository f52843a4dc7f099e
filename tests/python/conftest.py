import os
import pathlib

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The library under test: the build tree's by default, or an installed one.
LIBRARY = pathlib.Path(os.environ.get("BLOAD_LIBRARY", ROOT / "build" / "libbload.so"))
DATA = ROOT / "examples" / "data"

torch.ops.load_library(str(LIBRARY))
# A block table's columns by name: index rows with COLUMN["sequence"], never a bare number.
COLUMN = {name: index for index, name in enumerate(torch.ops.bload.table_columns())}


def read_lengths(name):
    return torch.ops.bload.read_lengths(str(DATA / name)).tolist()


@pytest.fixture(scope="session")
def action_genome_lengths():
    return read_lengths("action_genome_like.lengths")
