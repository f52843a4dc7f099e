"""Saves bload's recurrent model, `bload.nn.PackedGRU`, scripted (TorchScript), for the trainers
that load a model file: `examples/cpp/train --model FILE`, `examples/train.py --model FILE` and
`examples/tch_trainer.rs --model FILE`. Its shape is theirs: 16 features, a state of 64, one
output. Run from the repository root after `make`, which installs the bload package into .venv:

    .venv/bin/python examples/packed_gru.py build/packed_gru.pt
"""

import argparse

import bload
import torch

FEATURES, HIDDEN, OUTPUTS = 16, 64, 1


def scripted(seed: int = 0) -> torch.jit.ScriptModule:
    """The scripted model, its weights drawn from `seed` (the same on every rank)."""
    torch.manual_seed(seed)
    return torch.jit.script(bload.nn.PackedGRU(FEATURES, HIDDEN, OUTPUTS))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", help="where to save the TorchScript model (.pt)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    scripted(args.seed).save(args.output)
    print(f"saved {args.output}")


if __name__ == "__main__":
    main()
