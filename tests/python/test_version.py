"""One version everywhere, written in one place: Cargo.toml's [package] version
(docs/versioning.md). bload.__version__ is the loaded library's bload::version(), `bload
--version` the command line's, the installed distribution's comes through pyproject.toml's
dynamic version and the CMake package's through CMakeLists.txt, both read from Cargo.toml
(tests/cli_version.rs checks that those files keep no version of their own)."""

import ctypes
import importlib.metadata
import re
import subprocess

import bload
import pytest
from conftest import LIBRARY, ROOT

CLI = ROOT / "target" / "release" / "bload"


def cargo_version():
    """The [package] version: the first `version = "X.Y.Z"` line, as CMake and pyproject read it."""
    found = re.search(
        r'^version = "([0-9]+\.[0-9]+\.[0-9]+)"', (ROOT / "Cargo.toml").read_text(), re.MULTILINE
    )
    assert found, "Cargo.toml has no version line"
    return found.group(1)


def test_the_package_version_is_the_loaded_librarys_and_cargos():
    version = ctypes.CDLL(str(LIBRARY)).bload_version
    version.restype = ctypes.c_char_p
    assert re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", bload.__version__), bload.__version__
    assert bload.__version__ == version().decode() == cargo_version()


def test_the_command_line_says_the_same_version():
    result = subprocess.run(
        [str(CLI), "--version"], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout == f"bload {bload.__version__}\n"


def test_the_installed_distribution_says_the_same_version():
    try:
        installed = importlib.metadata.version("bload")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("bload is imported from a source tree, not an installed distribution")
    assert installed == bload.__version__


def test_the_installed_cmake_package_says_the_same_version():
    # `make plugin` installs the C++ package under build/install (lib or lib64).
    files = sorted((ROOT / "build" / "install").glob("*/cmake/bload/bloadConfigVersion.cmake"))
    if not files:
        pytest.skip("no CMake package installed under build/install")
    found = re.search(r'set\(PACKAGE_VERSION "([^"]+)"\)', files[0].read_text())
    assert found, files[0]
    assert found.group(1) == bload.__version__
