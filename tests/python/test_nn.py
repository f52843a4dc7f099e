"""bload.nn.PackedGRU, bload's recurrent model: the C++ module bload::nn::PackedGRU given the
weights of the scripted Python one computes the same outputs and final states, for a packed batch
(forward) and a lanes epoch, each batch going on from the one before's state (forward_lanes); and
the scripted model saved and loaded again computes what the eager one does."""

import subprocess

import bload
import pytest
import torch
from conftest import ROOT

INTEROP = ROOT / "build" / "tests" / "cpp" / "bload_packed_gru_interop"
FEATURES, HIDDEN, OUTPUTS = 3, 5, 2
# One long sequence: its lane runs on after the others end, so the lanes epoch has batches with
# rows that carry, rows that start afresh, sequences that start mid-row and rows of padding alone.
LENGTHS = [45, 8, 7, 6, 5, 4, 3]
T_MAX, BLOCKS = 9, 3


def random_data():
    return torch.randn(BLOCKS, T_MAX, FEATURES, dtype=torch.float64)


def inputs():
    """A packed batch with pieces after the first in a row (so forward must reset mid-row), and
    the lanes epoch's batches with a random state to start from; the data random (float64)."""
    torch.manual_seed(1)
    packed = bload.BlockSampler(LENGTHS, T_MAX, BLOCKS, split=True)
    lanes = [batch.table for batch in bload.BlockSampler(LENGTHS, T_MAX, BLOCKS, policy="lanes")]
    carries = [bload.ops.carry_mask(table, BLOCKS, T_MAX) for table in lanes]
    assert any(carry.any() and not carry.all() for carry in carries)
    block = bload.ops.COLUMN["block"]
    assert any(table[:, block].unique().numel() < BLOCKS for table in lanes)  # padding rows
    return {
        "packed_data": random_data(),
        "packed_table": next(batch.table for batch in packed if len(batch.table) > BLOCKS),
        "lanes_data": [random_data() for _ in lanes],
        "lanes_tables": lanes,
        "carries": carries,
        "state": torch.randn(BLOCKS, HIDDEN, dtype=torch.float64),
    }


def lanes_epoch(model, given, state):
    """forward_lanes over the epoch's lane batches, each from the one before's final state."""
    outputs, states = [], []
    for data, table, carry in zip(given["lanes_data"], given["lanes_tables"], given["carries"]):
        batch_outputs, state = model.forward_lanes(data, table, carry, state)
        outputs.append(batch_outputs)
        states.append(state)
    return outputs, states


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
        outputs, states = lanes_epoch(model, given, given["state"])
    torch.testing.assert_close(cpp["forward"], forward, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(cpp["lanes_outputs"], outputs, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(cpp["lanes_states"], states, rtol=1e-12, atol=1e-12)


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
    torch.testing.assert_close(
        lanes_epoch(loaded, given, given["state"]), lanes_epoch(eager, given, given["state"])
    )
