"""The public surface by intent: every operator registered under torch.ops.bload is in one of
docs/operators.md's tables, and every operator those tables name is registered (a new operator
is documented, or it is not added)."""

import re

import bload  # noqa: F401  (loads the library)
import torch
from conftest import ROOT


def documented():
    """The operators named in the first column of docs/operators.md's tables."""
    text = (ROOT / "docs" / "operators.md").read_text()
    return set(re.findall(r"^\| `([a-z_]+)\(", text, flags=re.MULTILINE))


def registered():
    names = torch._C._dispatch_get_all_op_names()
    return {name.split("::", 1)[1] for name in names if name.startswith("bload::")}


def test_every_registered_operator_is_documented():
    assert registered() - documented() == set()


def test_every_documented_operator_is_registered():
    assert documented() - registered() == set()
