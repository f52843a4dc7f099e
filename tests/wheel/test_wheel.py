"""The wheel `make wheel` builds, installed as on a machine with torch but no Rust, CMake or C++
compiler: a fresh venv whose PATH holds nothing but its own bin/, with no build step.

The fresh venv sees this environment's torch through a .pth file naming a directory of links
to the distributions of this environment's site-packages that the wheel's own metadata pulls in
(its Requires-Dist, and theirs, transitively): nothing else, so a module bload imports that its
metadata does not require (numpy, which torch does not require) fails here as on a user's
machine. Installing torch from PyPI again would take minutes and gigabytes, and
--system-site-packages would need a base interpreter that has torch, which a venv's base does
not. pip resolves the wheel's requirement on torch against that torch with --no-index, so a
requirement the built-against torch does not meet fails the install here.

    make test-wheel      # builds dist/bload-*.whl, then runs this file
"""

import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest
import torch
from packaging.requirements import Requirement

ROOT = pathlib.Path(__file__).resolve().parents[2]
LENGTHS = ROOT / "examples" / "data" / "action_genome_like.lengths"
TIMEOUT = 600  # a hang becomes a failure
# What the fresh venv must not find on PATH: nothing may be built there.
BUILD_TOOLS = ["cargo", "rustc", "cmake", "ninja", "c++", "g++", "gcc", "cc", "clang", "nvcc"]
# Left out of the view of this environment: the package under test and the build tools.
HIDDEN = re.compile(r"^(bload|cmake|ninja|scikit_build_core)([-_.].*)?$|^__editable__|^_bload")


def _torch_series():
    """python/bload/_torch_series.py loaded from its file: the series rule alone, without
    importing bload (as python/build_hooks/torch_requirement.py loads it)."""
    spec = importlib.util.spec_from_file_location(
        "_bload_torch_series", ROOT / "python" / "bload" / "_torch_series.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


requirement = _torch_series().requirement


def wheel_requirements(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(
            next(n for n in names if n.endswith(".dist-info/METADATA"))
        ).decode()
    return [Requirement(line) for line in re.findall(r"^Requires-Dist: (.*)$", metadata, re.M)]


def required_entries(wheel, site):
    """The top-level names in `site` (packages, modules, .dist-info) of every distribution the
    wheel requires, transitively, by this environment's metadata (markers evaluated, with the
    extras each is asked for); bload itself and the build tools are never among them."""
    from importlib import metadata

    def wanted(requirement, extras):
        # A requirement of a distribution counts when its marker holds with no extra or with
        # one of the extras the distribution was asked for (torch asks for cuda-toolkit[...]).
        marker = requirement.marker
        return marker is None or any(marker.evaluate({"extra": extra}) for extra in extras)

    entries, seen = set(), set()
    pending = [(requirement, {""}) for requirement in wheel_requirements(wheel)]
    while pending:
        requirement, extras = pending.pop()
        if not wanted(requirement, extras):
            continue
        key = (re.sub(r"[-_.]+", "-", requirement.name).lower(), frozenset(requirement.extras))
        if key in seen:
            continue
        seen.add(key)
        distribution = metadata.distribution(requirement.name)
        for file in distribution.files or []:
            top = pathlib.PurePath(file).parts[0]
            if top in ("..", "__pycache__") or HIDDEN.match(top) or top.endswith(".pth"):
                continue  # scripts installed outside site-packages, caches, the hidden
            if (site / top).exists():
                entries.add(top)
        asked = {""} | set(requirement.extras)
        pending.extend((Requirement(line), asked) for line in distribution.requires or [])
    return entries


def the_wheel():
    wheels = sorted((ROOT / "dist").glob("bload-*.whl"))
    assert len(wheels) == 1, f"expected one wheel in dist/ (`make wheel`), found {wheels}"
    return wheels[0]


@pytest.fixture(scope="module")
def wheel():
    return the_wheel()


@pytest.fixture(scope="module")
def fresh(tmp_path_factory, wheel):
    """A fresh venv with the wheel installed; returns (its bin/, the environment to run it in)."""
    root = tmp_path_factory.mktemp("fresh")
    venv, view = root / "venv", root / "torch_view"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=TIMEOUT
    )
    view.mkdir()
    here = pathlib.Path(sysconfig.get_paths()["purelib"])
    for name in sorted(required_entries(wheel, here)):
        (view / name).symlink_to(here / name)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    pathlib.Path(site, "torch_of_the_build_env.pth").write_text(f"{view}\n")
    home = root / "home"
    home.mkdir()
    env = {"PATH": str(venv / "bin"), "HOME": str(home), "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1"}
    # This environment's pip, run by the fresh interpreter (pip --python): offline, no build.
    install = [
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "--no-index",
        "--only-binary",
        ":all:",
        "--disable-pip-version-check",
        "--quiet",
        wheel,
    ]
    result = subprocess.run(install, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return venv / "bin", env


def run(env, *command, cwd=None):
    result = subprocess.run(
        [str(c) for c in command], capture_output=True, text=True, timeout=TIMEOUT, env=env, cwd=cwd
    )
    assert result.returncode == 0, f"{command}: {result.stdout}{result.stderr}"
    return result.stdout


def test_the_wheel_holds_the_library_the_command_and_the_torch_series(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        tags = archive.read(next(n for n in names if n.endswith(".dist-info/WHEEL"))).decode()
        build_info = archive.read("bload/_build_info.py").decode()
        library = archive.read("bload/libbload.so")
    assert "bload/__init__.py" in names
    assert any(re.fullmatch(r"bload-[0-9.]+\.data/scripts/bload", n) for n in names), names
    built_for = re.search(r'^TORCH_VERSION = "(.+)"$', build_info, re.M).group(1)
    # One series, derived from the torch the library was built against (the running one here).
    required = wheel_requirements(wheel)
    assert (
        required
        == [Requirement(requirement(built_for))]
        == [Requirement(requirement(torch.__version__))]
    )
    major, minor = (int(part) for part in torch.__version__.split(".")[:2])
    assert required[0].specifier.contains(f"{major}.{minor}.9")
    assert not required[0].specifier.contains(f"{major}.{minor + 1}.0")
    assert not required[0].specifier.contains(f"{major}.{minor - 1}.9")
    # No Python C API in the library: one wheel for every Python of the torch series.
    assert re.search(r"^Tag: py3-none-linux_\w+$", tags, re.M), tags
    # libtorch is found beside the package, not at this machine's path (torch's headers' paths
    # stay in the library as their asserts' __FILE__, which is harmless).
    assert b"$ORIGIN/../torch/lib" in library
    assert str(pathlib.Path(torch.__file__).parent / "lib").encode() not in library
    # No path of the build machine in the binaries: not the clone, not torch's headers (the
    # __FILE__ of checks), not cargo's registry (panics' file names).
    with zipfile.ZipFile(wheel) as archive:
        command = next(n for n in archive.namelist() if n.endswith(".data/scripts/bload"))
        binaries = {"libbload.so": library, "bload": archive.read(command)}
    cargo_home = os.environ.get("CARGO_HOME") or str(pathlib.Path.home() / ".cargo")
    for name, binary in binaries.items():
        for path in (str(ROOT), str(pathlib.Path(torch.__file__).parent), cargo_home):
            assert path.encode() not in binary, (
                f"{name} holds {path}: {binary.count(path.encode())}x"
            )


def test_no_build_tool_is_reachable(fresh):
    bin_dir, env = fresh
    for tool in BUILD_TOOLS:
        assert shutil.which(tool, path=env["PATH"]) is None, tool
    assert (bin_dir / "bload").is_file()


def test_import_and_the_version_agree_with_the_command(fresh):
    bin_dir, env = fresh
    out = run(
        env,
        bin_dir / "python",
        "-c",
        "import bload, json; print(json.dumps([bload.__version__, bload.library_path(), bload.__file__]))",
    )
    version, library, package = json.loads(out)
    # The installed copy, not the clone's or this environment's.
    assert pathlib.Path(package).is_relative_to(bin_dir.parent)
    assert pathlib.Path(library).is_relative_to(bin_dir.parent)
    assert run(env, bin_dir / "bload", "--version").strip() == f"bload {version}"
    # Only what the wheel's metadata pulls in is there: not numpy, which torch does not require.
    missing = subprocess.run(
        [bin_dir / "python", "-c", "import numpy"], capture_output=True, timeout=TIMEOUT, env=env
    )
    assert missing.returncode != 0


def test_the_readme_loop_trains_on_the_plans_the_command_makes(fresh, tmp_path):
    bin_dir, env = fresh
    out = run(
        env,
        bin_dir / "python",
        ROOT / "examples" / "python_loop.py",  # the README's loop on LENGTHS, as a user runs it
        cwd=tmp_path,
    )
    epochs = re.findall(
        r"^rank 0: epoch (\d): (\d+) batches, loss ([\d.]+), padding [\d.]+%, plan (0x[0-9a-f]{16})$",
        out,
        re.M,
    )
    assert [e[0] for e in epochs] == ["0", "1"], out
    # The loop's plans are the Rust command's plans of the same 1000 lengths, epoch by epoch.
    first = tmp_path / "first_1000.lengths"
    first.write_text("".join(LENGTHS.read_text().splitlines(keepends=True)[:1000]))
    for epoch, batches, loss, plan_hash in epochs:
        plan = json.loads(
            run(
                env,
                bin_dir / "bload",
                "plan",
                "--lengths",
                first,
                "--t-max",
                94,
                "--rank",
                0,
                "--blocks-per-batch",
                8,
                "--epoch",
                epoch,
                "--json",
            )
        )
        assert (int(batches), plan_hash) == (len(plan["batches"]), plan["plan_hash"])
        assert 0 < float(loss) < 1
    assert epochs[0][3] != epochs[1][3]


def test_the_command_plans_the_bundled_data(fresh):
    bin_dir, env = fresh
    out = run(
        env, bin_dir / "bload", "stats", "--lengths", LENGTHS, "--t-max", 94, "--world-size", 2
    )
    assert "7464 sequences" in out
    assert re.search(r"^best_fit\s+\d+\s+\d+\s+0\s+", out, re.M), out
