"""A real public data set packed from a sequence store: UCI's Japanese Vowels as the sktime
package ships it (requirements-dev.txt; nothing is downloaded), through
examples/store_japanese_vowels.py: every frame packed exactly once, as the store holds it."""

import pytest
from ddp_support import example_module

pytest.importorskip("sktime")
store_japanese_vowels = example_module("store_japanese_vowels")


def test_japanese_vowels_packed_from_a_store(tmp_path):
    counts = store_japanese_vowels.pack(tmp_path, t_max=16, workers=2)
    assert (counts["sequences"], counts["frames"], counts["longest"]) == (640, 9961, 29)
    assert counts["packed_once"]
    assert counts["slots"] >= counts["frames"]
    speakers = {int(counts["store"][i][1][0]) for i in range(len(counts["store"]))}
    assert speakers == set(range(1, 10))
