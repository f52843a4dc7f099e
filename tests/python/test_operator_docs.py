"""The public surface by intent: every operator registered under torch.ops.bload is in one of
docs/operators.md's tables, and every operator those tables name is registered (a new operator
is documented, or it is not added); likewise every class registered under torch.classes.bload
and the page's table of classes."""

import re

import bload  # noqa: F401  (loads the library)
import pytest
import torch
from conftest import ROOT

OPERATORS_PAGE = ROOT / "docs" / "operators.md"


def documented():
    """The operators named in the first column of docs/operators.md's tables."""
    text = OPERATORS_PAGE.read_text()
    return set(re.findall(r"^\| `([a-z_]+)\(", text, flags=re.MULTILINE))


def registered():
    names = torch._C._dispatch_get_all_op_names()
    return {name.split("::", 1)[1] for name in names if name.startswith("bload::")}


def test_every_registered_operator_is_documented():
    assert registered() - documented() == set()


def test_every_documented_operator_is_registered():
    assert documented() - registered() == set()


def documented_classes():
    """The classes named in the first column of the table under docs/operators.md's "## Classes"."""
    text = OPERATORS_PAGE.read_text()
    section = re.search(r"^## Classes\n(.*?)(?=^## |\Z)", text, flags=re.MULTILINE | re.DOTALL)
    assert section, "docs/operators.md has no section ## Classes"
    return set(re.findall(r"^\| `([A-Z]\w*)", section.group(1), flags=re.MULTILINE))


def registered_classes():
    """The classes of torch.classes.bload, from the schemas of every registered class's methods
    (torch lists no class names; a class has at least its constructor or a method)."""
    names = set()
    for schema in torch._C._jit_get_custom_class_schemas():
        names.update(re.findall(r"__torch__\.torch\.classes\.bload\.(\w+)", str(schema)))
    assert names, "no class of torch.classes.bload found in torch's class schemas"
    return names


def test_every_registered_class_is_documented():
    assert registered_classes() - documented_classes() == set()


def test_every_documented_class_is_registered():
    assert documented_classes() - registered_classes() == set()


@pytest.mark.parametrize("name", sorted(documented_classes()))
def test_each_documented_class_is_reachable(name):
    getattr(torch.classes.bload, name)  # raises RuntimeError for a class not registered
