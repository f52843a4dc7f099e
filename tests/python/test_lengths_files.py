"""One lengths format everywhere: each tricky file of tests/data/lengths reads the same from
Python (bload.read_lengths) and the CLI (`bload plan --json`) as expected.txt says, or is refused
naming the same line (tests/cpp/lengths_test.cpp checks C++ against the same file)."""

import json
import re
import subprocess
from collections import defaultdict

import bload
import pytest
from conftest import ROOT

CASES = ROOT / "tests" / "data" / "lengths"
CLI = ROOT / "target" / "release" / "bload"
MAX_T_MAX = 16777216


def expected_cases():
    cases = []
    for line in (CASES / "expected.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, values = line.split(": ")
            cases.append((name, values.split()))
    return cases


def where_refused(name, message):
    """The line an error names (0: the whole file), from `FILE:LINE = ...` or `FILE = ...`."""
    found = re.search(re.escape(str(CASES / name)) + r"(?::(\d+))? = ", message)
    assert found, message
    return int(found.group(1) or 0)


def cli_lengths(name, t_max):
    """The lengths the CLI read, from the pieces of its plan (split where longer than t_max)."""
    command = [
        CLI,
        "plan",
        "--lengths",
        CASES / name,
        "--t-max",
        t_max,
        "--split",
        "--rank",
        0,
        "--json",
    ]
    result = subprocess.run(
        [str(word) for word in command], capture_output=True, text=True, timeout=60
    )
    if result.returncode != 0:
        return result.stderr
    steps = defaultdict(int)
    for batch in json.loads(result.stdout)["batches"]:
        for block in batch["blocks"]:
            for piece in block["pieces"]:
                steps[piece["index"]] += piece["length"]
    return [steps[index] for index in range(len(steps))]


@pytest.mark.parametrize("name, values", expected_cases())
def test_python_and_the_cli_read_each_file_alike(name, values):
    if values[0] == "error":
        with pytest.raises(RuntimeError) as error:
            bload.read_lengths(CASES / name)
        assert where_refused(name, str(error.value)) == int(values[1])
        message = cli_lengths(name, 10)
        assert isinstance(message, str) and where_refused(name, message) == int(values[1])
    else:
        expected = [int(value) for value in values]
        assert bload.read_lengths(CASES / name).tolist() == expected
        assert cli_lengths(name, min(max(expected), MAX_T_MAX)) == expected
