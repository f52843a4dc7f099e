"""scikit-build-core's provider of the distribution's dependencies (pyproject.toml,
metadata.dependencies): torch of the series the build compiles libbload.so against, as
`torch>=2.13,<2.14`, so that a wheel built here installs only beside a torch it loads into.

The torch is the one CMake builds against (cmake/BloadTorch.cmake): the build's Python's own. In
pip's isolated build environment that torch is hidden by PYTHONPATH, so, as BloadTorch.cmake
does, a second try runs without it. The series rule lives in python/bload/_torch_series.py.
"""

import importlib.util
import os
import pathlib
import subprocess
import sys

_SERIES = pathlib.Path(__file__).resolve().parents[1] / "bload" / "_torch_series.py"


def _series_rule():
    spec = importlib.util.spec_from_file_location("_bload_torch_series", _SERIES)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _torch_version():
    ask = [sys.executable, "-c", "import torch; print(torch.__version__)"]
    answer = subprocess.run(ask, capture_output=True, text=True)
    if answer.returncode != 0 and "PYTHONPATH" in os.environ:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE")}
        answer = subprocess.run(ask, capture_output=True, text=True, env=env)
    if answer.returncode != 0:
        raise RuntimeError(
            f"bload: {sys.executable} could not import torch, which libbload.so is built against: "
            f"build bload in an environment that has torch.\n{answer.stderr}"
        )
    return answer.stdout.strip()


def dynamic_metadata(field, settings=None):
    if field != "dependencies":
        raise RuntimeError(f"torch_requirement provides `dependencies`, not {field!r}")
    return [_series_rule().requirement(_torch_version())]
