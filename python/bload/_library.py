"""Finds libbload.so and loads it into torch, once per process.

The library holds the operators (torch.ops.bload) and the planner (torch.classes.bload) that the
rest of the package calls. It loads only into the torch series it was built against (2.13.x for a
build against 2.13.0; bload._torch_series, the rule the wheel's requirement on torch follows
too): a mismatch is said up front, naming both releases and how to rebuild, instead of the
dynamic linker's "undefined symbol" about one of torch's internals.
"""

import os
import pathlib

import torch

from bload._torch_series import same_series

_HERE = pathlib.Path(__file__).resolve().parent
_REBUILD = (
    "rebuild bload against the running torch: `pip install --force-reinstall --no-deps "
    "--no-build-isolation .` in a clone of bload, with this environment active"
)
_loaded = None


def _built_for():
    """The torch release the packaged library was built against, or None when unknown."""
    try:
        from bload import _build_info
    except ImportError:  # a library from BLOAD_LIBRARY, or a source tree: nothing recorded
        return None
    return _build_info.TORCH_VERSION


def library_path():
    """The path of libbload.so, for C++ and TorchScript users who load it themselves
    (`torch.ops.load_library(bload.library_path())`). BLOAD_LIBRARY, where set, names another
    build of it. Raises ImportError when the library is missing or was built for another torch."""
    override = os.environ.get("BLOAD_LIBRARY")
    path = pathlib.Path(override) if override else _HERE / "libbload.so"
    if not path.is_file():
        where = "BLOAD_LIBRARY" if override else "the bload package"
        raise ImportError(f"bload: no libbload.so at {path} ({where}): {_REBUILD}")
    built = _built_for()
    if not override and built is not None and not same_series(built, torch.__version__):
        raise ImportError(
            f"bload: {path} was built for torch {built}, but torch {torch.__version__} is "
            f"running: {_REBUILD}"
        )
    return str(path)


def load():
    """Loads the library into this process's torch unless it is loaded already; returns its path.
    DataLoader workers that are spawned import bload, and so load it, when they unpickle a bload
    object."""
    global _loaded
    if _loaded is None:
        path = library_path()
        try:
            torch.ops.load_library(path)
        except OSError as err:
            built = _built_for() or "an unrecorded torch"
            raise ImportError(
                f"bload: {path} does not load into torch {torch.__version__} (built for "
                f"{built}): {err}. {_REBUILD}"
            ) from err
        _loaded = path
    return _loaded
