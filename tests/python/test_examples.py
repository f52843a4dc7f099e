"""The short trainers of examples/ (examples/train.py and examples/cpp/train.cpp) run as their
docstrings say: on one process with the packed policy, and on 2 ranks under torchrun with the
lanes policy, where a run resumed from its checkpoint prints what the run left alone prints (the
lanes run checkpoints the most: the sampler, and each lane's state)."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ddp_support import TORCHRUN, torchrun

ROOT = Path(__file__).resolve().parents[2]
CPP_TRAIN = ROOT / "build" / "examples" / "cpp" / "train"
# Few sequences (about ten batches an epoch): the runs are whole programs, started three times a
# case, and what they check (a resumed run prints what the run left alone prints) needs no more.
SMALL = ["--sequences", "100"]


def command(language, ranks, log_dir):
    if language == "python":
        program = [str(ROOT / "examples" / "train.py")]
        launcher = [sys.executable] if ranks == 1 else []
    else:
        if not CPP_TRAIN.exists():
            pytest.skip(
                "build/examples/cpp/train is built by `make plugin` where gloo's headers are"
            )
        program = [str(CPP_TRAIN)]
        launcher = [] if ranks == 1 else ["--no-python"]
    return (
        launcher + program
        if ranks == 1
        else torchrun(launcher + program, log_dir, ranks_per_node=ranks)
    )


def run(language, ranks, log_dir, *arguments):
    result = subprocess.run(
        command(language, ranks, log_dir) + SMALL + list(arguments),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return re.findall(
        r"^epoch (\d+): (\d+) batches per rank, mean loss ([\d.]+)", result.stdout, re.M
    )


def epochs_of(run_output):
    """The epochs a run printed, each with batches."""
    assert all(int(batches) > 0 for _, batches, _ in run_output)
    return [epoch for epoch, _, _ in run_output]


@pytest.mark.parametrize("language", ["python", "cpp"])
def test_one_process_trains_its_epochs(language, tmp_path):
    printed = run(language, 1, tmp_path, "--policy", "best_fit", "--epochs", "2")
    assert epochs_of(printed) == ["0", "1"]


@pytest.mark.parametrize("language", ["python", "cpp"])
def test_a_resumed_run_ends_as_the_run_left_alone(language, tmp_path):
    if not shutil.which(str(TORCHRUN)):
        pytest.skip("torchrun is not beside this Python")
    options = ["--policy", "lanes", "--t-max", "32"]
    alone = run(language, 2, tmp_path, *options, "--epochs", "2")
    assert epochs_of(alone) == ["0", "1"]
    checkpoint = str(tmp_path / "run.pt")
    first = run(language, 2, tmp_path, *options, "--epochs", "1", "--checkpoint", checkpoint)
    assert os.path.exists(checkpoint) and first == alone[:1]
    resumed = run(language, 2, tmp_path, *options, "--epochs", "2", "--checkpoint", checkpoint)
    assert resumed == alone[1:], "the resumed run trained another epoch than the run left alone"
