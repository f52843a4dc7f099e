"""bload.nn.PackedGRU, bload's recurrent model: the C++ module bload::nn::PackedGRU given the
weights of the scripted Python one computes the same outputs and final states, for packed batches
(forward) and lane batches carrying a state (forward_lanes); and the scripted model saved and
loaded again computes what the eager one does."""

import subprocess

import bload
import pytest
import torch
from conftest import ROOT

INTEROP = ROOT / "build" / "tests" / "cpp" / "bload_packed_gru_interop"
FEATURES, HIDDEN, OUTPUTS = 3, 5, 2
LENGTHS = [2, 25, 7, 1, 30, 12, 9, 4, 3, 17, 8, 5, 11, 6]
T_MAX, BLOCKS = 9, 3


def carry(table):
    return bload.ops.carry_mask(table, BLOCKS, T_MAX)


def a_table(policy, where):
    """The first block table of the epoch (rank 0 of 1) that meets `where(table)`."""
    sampler = bload.BlockSampler(LENGTHS, T_MAX, BLOCKS, policy=policy, split=policy != "lanes")
    return next(batch.table for batch in sampler if where(batch.table))


def inputs():
    """A packed batch with pieces after the first in a row (so forward must reset mid-row), and
    a lane batch with rows that carry and rows that do not, with a random state to go on from;
    the data random (float64)."""
    torch.manual_seed(1)
    lanes_table = a_table(
        "lanes", lambda table: bool(carry(table).any() and not carry(table).all())
    )
    return {
        "packed_data": torch.randn(BLOCKS, T_MAX, FEATURES, dtype=torch.float64),
        "packed_table": a_table("best_fit", lambda table: len(table) > BLOCKS),
        "lanes_data": torch.randn(BLOCKS, T_MAX, FEATURES, dtype=torch.float64),
        "lanes_table": lanes_table,
        "carry": carry(lanes_table),
        "state": torch.randn(BLOCKS, HIDDEN, dtype=torch.float64),
    }


def scripted_model(seed=0):
    torch.manual_seed(seed)
    return torch.jit.script(bload.nn.PackedGRU(FEATURES, HIDDEN, OUTPUTS).double())


@pytest.mark.skipif(
    not INTEROP.exists(), reason="the C++ tests were not built (make test-cpp builds them)"
)
def test_the_cpp_module_computes_what_the_scripted_python_one_does(tmp_path):
    model = scripted_model()
    model.save(str(tmp_path / "model.pt"))
    given = inputs()
    torch.save(given, tmp_path / "in.pt")
    result = subprocess.run(
        [INTEROP, tmp_path / "model.pt", tmp_path / "in.pt", tmp_path / "out.pt"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    cpp = torch.load(tmp_path / "out.pt", weights_only=False)

    with torch.no_grad():
        forward = model(given["packed_data"], given["packed_table"])
        outputs, state = model.forward_lanes(
            given["lanes_data"], given["lanes_table"], given["carry"], given["state"]
        )
        from_zero = model.forward_lanes(
            given["lanes_data"], given["lanes_table"], given["carry"], torch.zeros_like(state)
        )[0]
    torch.testing.assert_close(cpp["forward"], forward, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(cpp["lanes_outputs"], outputs, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(cpp["lanes_state"], state, rtol=1e-12, atol=1e-12)
    # The carried state reached the outputs, so the lanes comparison covers carrying it.
    assert not torch.allclose(outputs, from_zero)


def test_the_saved_scripted_model_computes_what_the_eager_one_does(tmp_path):
    torch.manual_seed(0)
    eager = bload.nn.PackedGRU(FEATURES, HIDDEN, OUTPUTS).double()
    torch.jit.script(eager).save(str(tmp_path / "model.pt"))
    loaded = torch.jit.load(str(tmp_path / "model.pt"))
    given = inputs()
    assert loaded.hidden == HIDDEN  # what trainers read to allocate lane states
    torch.testing.assert_close(
        loaded(given["packed_data"], given["packed_table"]),
        eager(given["packed_data"], given["packed_table"]),
    )
    lanes = (given["lanes_data"], given["lanes_table"], given["carry"], given["state"])
    for got, want in zip(loaded.forward_lanes(*lanes), eager.forward_lanes(*lanes)):
        torch.testing.assert_close(got, want)
