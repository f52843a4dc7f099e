"""No circle among a folder's files: in the Rust core (each folder of modules under src/) and in
the Python package, a file uses its neighbours in one direction only, so a newcomer can read a
folder from its base up (docs/architecture.md). A use through the folder's re-exports (`super::X`
where mod.rs has `pub use file::X`) counts as a use of that file; doc comments and tests do not."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def rust_uses(folder):
    """Each module of `folder` (a file, or a folder with a mod.rs) and the neighbours it uses."""
    modules = {
        path.stem: path
        for path in folder.glob("*.rs")
        if path.stem not in ("mod", "lib", "main") and not path.stem.endswith("tests")
    }
    modules.update(
        {path.name: path / "mod.rs" for path in folder.iterdir() if (path / "mod.rs").exists()}
    )
    parent = folder / "mod.rs"
    exported = {}
    declared = parent.read_text() if parent.exists() else ""  # src/cli's are declared in main.rs
    for module, names in re.findall(r"pub(?:\(\w+\))? use (\w+)::\{?([\w\s,]+)\}?;", declared):
        exported.update({name: module for name in re.findall(r"\w+", names)})
    prefixes = ("super", "crate::" + "::".join(folder.relative_to(ROOT / "src").parts))
    uses = {}
    for name, path in modules.items():
        code = re.sub(r"//.*", "", path.read_text().split("#[cfg(test)]")[0])
        used = set()
        for prefix in map(re.escape, prefixes):
            used.update(re.findall(prefix + r"::(\w+)", code))
            for group in re.findall(prefix + r"::\{([^}]*)\}", code):
                used.update(re.findall(r"(?:^|,)\s*(\w+)", group))
        uses[name] = {exported.get(item, item) for item in used} & modules.keys() - {name}
    return uses


def python_uses(package):
    """Each module of `package` (a folder under python/) and the modules of it that it imports,
    anywhere in its code."""
    dotted = re.escape(".".join(package.relative_to(ROOT / "python").parts))
    modules = {path.stem for path in package.glob("*.py") if path.stem != "__init__"}
    uses = {}
    for name in modules:
        code = (package / f"{name}.py").read_text()
        used = set(re.findall(rf"^\s*(?:from|import) (?:{dotted}\.|\.)(\w+)", code, re.M))
        for group in re.findall(rf"^\s*from (?:{dotted}|\.) import \(?([\w\s,]+)\)?", code, re.M):
            used.update(re.findall(r"\w+", group))
        uses[name] = used & modules - {name}
    return uses


def circles(uses):
    """Every circle a depth-first walk meets, each as the modules round it."""
    found, state = [], {}

    def walk(module, path):
        state[module] = "open"
        for used in sorted(uses[module]):
            if state.get(used) == "open":
                found.append(path[path.index(used) :] + [used])
            elif used not in state:
                walk(used, path + [used])
        state[module] = "done"

    for module in sorted(uses):
        if module not in state:
            walk(module, [module])
    return found


RUST_FOLDERS = sorted({path.parent for path in (ROOT / "src").rglob("*.rs")} - {ROOT / "src"})


def test_the_walk_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert circles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("folder", RUST_FOLDERS, ids=lambda folder: str(folder.relative_to(ROOT)))
def test_no_circle_among_a_rust_folders_files(folder):
    assert circles(rust_uses(folder)) == []


def test_the_plan_folders_uses_are_read():
    # The check reads what it is meant to: shard.rs uses block.rs (a batch's blocks).
    assert "block" in rust_uses(ROOT / "src" / "plan")["shard"]


@pytest.mark.parametrize("package", ["bload", "bload/integrations"])
def test_no_circle_among_the_python_packages_modules(package):
    uses = python_uses(ROOT / "python" / package)
    assert uses, package
    assert circles(uses) == []
