"""bload inside the frameworks users train with, one module each, imported on demand so that
`import bload` imports none of them (docs/integrations.md has each recipe):

    bload.integrations.accelerate    prepare_loader(accelerator, loader): accelerate's device
                                     placement, bload's sharding (not accelerate's, again)
    bload.integrations.transformers  BlockTrainer: an HF Trainer whose train loader is bload's,
                                     each PackedBatch handed to the model as keyword arguments
    bload.integrations.lightning     BlockDataModule: a LightningDataModule with bload's sampler
    bload.integrations.torchdata     stateful_loader(): a StatefulDataLoader over bload's sampler
                                     whose state_dict() resumes mid-epoch exactly, workers on

Each module imports its framework when it is imported itself.
"""

import importlib

__all__ = ["accelerate", "lightning", "torchdata", "transformers"]


def __getattr__(name):
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
