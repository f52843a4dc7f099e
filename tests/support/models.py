"""The test models by name, with their initial weights drawn from a seed (the same on every rank):
"gru" (bload.nn.PackedGRU, bload's own recurrent model, with the running-sum data's features)
and "transformer" (packed_transformer.py). Saves one scripted, for the C++ trainer's --model FILE
(run from the repository root after `make`):

    .venv/bin/python tests/support/models.py transformer build/packed_transformer.pt
"""

import argparse

import bload
import torch

# Beside this file: on the path as a script's directory, or by pytest's `pythonpath` and the
# harness's PYTHONPATH when imported.
from packed_transformer import PackedTransformer
from running_sum import FEATURES

HIDDEN, OUTPUTS = 64, 1  # the C++ trainer's own GRU has the same (--model cpp)


def packed_gru():
    """The GRU the trainers train on the running-sum data."""
    return bload.nn.PackedGRU(FEATURES, HIDDEN, OUTPUTS)


MODELS = {"gru": packed_gru, "transformer": PackedTransformer}


def tiny_llama(vocabulary, positions, attention="sdpa", seed=0):
    """A random-weight Llama of two small layers in float64 (transformers' config classes), for
    the packed-LM tests: `vocabulary` tokens, `positions` the longest position it embeds."""
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=vocabulary,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=positions,
        attn_implementation=attention,
    )
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(config).double()


def build(kind, seed=0):
    """The eager model `kind`, its weights drawn from `seed`."""
    if kind not in MODELS:
        raise ValueError(f"model = {kind!r}: expected one of {', '.join(MODELS)}")
    torch.manual_seed(seed)
    return MODELS[kind]()


def scripted(kind, seed=0):
    """The model `kind` scripted (TorchScript), its weights drawn from `seed`."""
    return torch.jit.script(build(kind, seed))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=sorted(MODELS))
    parser.add_argument("output", help="where to save the TorchScript model (.pt)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    scripted(args.kind, args.seed).save(args.output)
    print(f"saved {args.output}")


if __name__ == "__main__":
    main()
