"""The README and docs/ cannot drift from the repository: every link, path, make target and
`bload` command they name exists, and every code block marked `<!-- runs: LANGUAGE -->` runs.

Python blocks run here, from the repository root. The C++ block is compiled and run by
`make test-downstream` (tests/downstream/CMakeLists.txt takes it out of README.md), so this test
checks only that the mark is where that project looks for it.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "BENCHMARKS.md"] + sorted(
    (ROOT / "docs").rglob("*.md")
)
# Keep a Changelog's kinds of change (https://keepachangelog.com/en/1.1.0/).
CHANGE_KINDS = ["Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"]
RUNS_MARK = re.compile(r"<!-- runs: (\w+) -->\n```(\w+)\n(.*?)\n```", re.S)
# Folders whose paths the docs name; build/, target/ and .venv are made by the build.
SOURCE_FOLDERS = (
    "src/",
    "cpp/",
    "cmake/",
    "python/",
    "tests/",
    "examples/",
    "benches/",
    "docs/",
    ".ci/",
)
BLOAD = ROOT / "target" / "release" / "bload"


def page_id(page):
    return str(page.relative_to(ROOT))


def anchors(page):
    """GitHub's anchors of a Markdown page's headings: lower case, punctuation dropped, spaces as -."""
    slugs = set()
    for heading in re.findall(r"^#+ (.+)$", page.read_text(), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        slugs.add(slug)
    return slugs


def without_code_blocks(text):
    return re.sub(r"```.*?```", "", text, flags=re.S)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_link_leads_somewhere(page):
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", without_code_blocks(page.read_text())):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    assert not broken, f"{page_id(page)} links to what is not there: {broken}"


@pytest.mark.parametrize(
    "page", [page for page in PAGES if page.name != "CHANGELOG.md"], ids=page_id
)
def test_every_path_named_exists(page):  # the changelog names files of the past too
    missing = []
    for token in set(re.findall(r"`([\w.\-/]+)`", page.read_text())):
        if token.startswith(SOURCE_FOLDERS) and not (ROOT / token).exists():
            missing.append(token)
    assert not missing, f"{page_id(page)} names paths that do not exist: {sorted(missing)}"


def make_targets():
    makefile = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([\w-]+):", makefile, re.M))


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_make_target_named_exists(page):
    text = page.read_text()
    code = re.findall(r"```.*?```", text, re.S) + re.findall(r"^    .*$", text, re.M)
    named = set(re.findall(r"`make ([a-z][\w-]*)", text))
    named |= set(re.findall(r"^\s*(?:\$ )?make ([a-z][\w-]*)", "\n".join(code), re.M))
    missing = sorted(named - make_targets())
    assert not missing, f"{page_id(page)} names make targets the Makefile lacks: {missing}"


def bload_commands():
    named = set()
    for page in PAGES:
        text = page.read_text()
        code = re.findall(r"```.*?```", text, re.S) + re.findall(r"^    .*$", text, re.M)
        for line in "\n".join(code).splitlines():
            match = re.match(r"\s*(?:\$ )?(?:target/release/)?bload ([a-z]+)\b", line)
            if match:
                named.add(match.group(1))
    return sorted(named)


@pytest.mark.skipif(not BLOAD.exists(), reason="target/release/bload is built by `make build`")
@pytest.mark.parametrize("command", bload_commands())
def test_every_bload_command_named_exists(command):
    result = subprocess.run([BLOAD, command, "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, (
        f"`bload {command}`, named in the docs, is not a command: {result.stderr}"
    )


def marked_blocks():
    blocks = []
    for page in PAGES:
        for number, (mark, language, code) in enumerate(RUNS_MARK.findall(page.read_text())):
            blocks.append(
                pytest.param(page, mark, language, code, id=f"{page_id(page)}-{number}-{mark}")
            )
    return blocks


def test_the_readme_has_a_runnable_loop_in_each_language():
    marks = [
        mark
        for page, mark, _, _ in (block.values for block in marked_blocks())
        if page.name == "README.md"
    ]
    assert sorted(marks) == ["cpp", "python"]


@pytest.mark.parametrize("page, mark, language, code", marked_blocks())
def test_marked_code_runs(page, mark, language, code, tmp_path):
    assert mark == language, f"a block marked `runs: {mark}` is fenced as {language}"
    if mark == "cpp":
        downstream = (ROOT / "tests" / "downstream" / "CMakeLists.txt").read_text()
        assert page.name == "README.md" and "<!-- runs: cpp -->" in downstream
        return
    assert mark == "python", f"no runner for `runs: {mark}` blocks"
    script = tmp_path / "block.py"
    script.write_text(code)
    # As a user runs it: the installed package (or the one PYTHONPATH names), from the root.
    result = subprocess.run(
        [sys.executable, script], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, f"the block in {page_id(page)} failed:\n{result.stderr[-3000:]}"
    assert result.stdout.strip(), "the block printed nothing"


def test_each_release_in_the_changelog_has_one_heading_per_kind():
    releases = re.split(r"^## ", (ROOT / "CHANGELOG.md").read_text(), flags=re.M)[1:]
    assert releases, "CHANGELOG.md has no release"
    for release in releases:
        name = release.splitlines()[0]
        kinds = re.findall(r"^### (.+)$", release, re.M)
        unknown = [kind for kind in kinds if kind not in CHANGE_KINDS]
        assert not unknown, f"{name}: {unknown}: expected kinds among {CHANGE_KINDS}"
        repeated = sorted({kind for kind in kinds if kinds.count(kind) > 1})
        assert not repeated, f"{name}: {repeated} headed more than once"
