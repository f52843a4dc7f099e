"""No circle among a folder's files: in the Rust core (each folder of modules under src/) and in
the Python package, a file uses its neighbours in one direction only, so a newcomer can read a
folder from its base up (docs/architecture.md). A use through the folder's re-exports (`super::X`
where mod.rs has `pub use file::X`) counts as a use of that file; doc comments and tests do not."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def without_tests(code):
    """`code` without its comments and test modules (declared `mod tests;`, or inline at the end)."""
    code = re.sub(r"//.*", "", code)
    code = re.sub(r"#\[cfg\(test\)\]\s*(?:#\[path = \"[^\"]*\"\]\s*)?mod \w+;", "", code)
    return code.split("#[cfg(test)]")[0]


def first_names(group):
    """The first name of each path of a `{...}` group (`a::{X, Y}, b::Z` gives a and b)."""
    names, depth, part = [], 0, ""
    for char in group + ",":
        depth += {"{": 1, "}": -1}.get(char, 0)
        if char == "," and depth == 0:
            names += re.findall(r"^\s*(\w+)", part)
            part = ""
        else:
            part += char
    return names


def used_after(prefix, code):
    """The names right after each `prefix::` path in `code`, a `{...}` group's included."""
    used = set(re.findall(re.escape(prefix) + r"::(\w+)", code))
    for at in (m.end() for m in re.finditer(re.escape(prefix) + r"::\{", code)):
        depth, end = 1, at
        while depth:
            depth += {"{": 1, "}": -1}.get(code[end], 0)
            end += 1
        used.update(first_names(code[at : end - 1]))
    return used


def rust_uses(folder):
    """Each module of `folder` (a file, or a folder with a mod.rs) and the neighbours it uses:
    through `super::` from a file or a folder's mod.rs, `super::super::` from a folder's other
    files, and `crate::` paths through the folder."""
    modules = {
        path.stem: [path]
        for path in folder.glob("*.rs")
        if path.stem not in ("mod", "lib", "main") and not path.stem.endswith("tests")
    }
    for sub in folder.iterdir():
        if (sub / "mod.rs").exists():
            inner = [path for path in sorted(sub.glob("*.rs")) if not path.stem.endswith("tests")]
            modules[sub.name] = inner
    parent = folder / "mod.rs"
    declared = parent.read_text() if parent.exists() else ""  # src/cli's are declared in main.rs
    exported = {}
    for module, names in re.findall(r"pub(?:\(\w+\))? use (\w+)::\{?([\w\s,]+)\}?;", declared):
        exported.update({name: module for name in re.findall(r"\w+", names)})
    absolute = "crate::" + "::".join(folder.relative_to(ROOT / "src").parts)
    uses = {}
    for name, paths in modules.items():
        used = set()
        for path in paths:
            code = without_tests(path.read_text())
            inside = path.parent != folder and path.name != "mod.rs"
            used |= used_after("super::super" if inside else "super", code)
            used |= used_after(absolute, code)
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
        imported = rf"^\s*from (?:{dotted}|\.) import (?:\(([\w\s,]+)\)|([\w ,]+))"
        for group in re.findall(imported, code, re.M):
            used.update(re.findall(r"\w+", " ".join(group)))
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
    # The check reads what it is meant to: shard.rs uses block.rs (a batch's blocks); the deal
    # folder's sort.rs uses scatter.rs (super::super::); shared/file.rs uses hash.rs (crate::).
    uses = rust_uses(ROOT / "src" / "plan")
    assert "block" in uses["shard"]
    assert {"scatter", "hash"} <= uses["deal"] | uses["shared"]
    assert first_names(" a::{X, Y}, b::Z, c") == ["a", "b", "c"]
    assert without_tests("fn f() {}\n#[cfg(test)]\nmod tests;\nfn g() { super::x(); }").count(
        "super"
    )


@pytest.mark.parametrize("package", ["bload", "bload/integrations"])
def test_no_circle_among_the_python_packages_modules(package):
    uses = python_uses(ROOT / "python" / package)
    assert uses, package
    assert circles(uses) == []
