"""bload with the Hugging Face Trainer: BlockTrainer, a Trainer whose train loader is bload's,
each PackedBatch handed to the model as keyword arguments.

The Trainer builds its own sampler and lets accelerate shard the loader; BlockTrainer serves
the BlockSampler it is given instead, prepared by bload.integrations.accelerate.prepare_loader
(bload's sharding, once), and turns each batch into the model's arguments with ModelInputs:

    args = TrainingArguments(output_dir, ...)   # starts torch.distributed under torchrun
    sampler = bload.BlockSampler(lengths, t_max, blocks_per_batch, seed=args.seed)
    trainer = BlockTrainer(model=model, args=args, train_dataset=dataset, train_sampler=sampler)
    trainer.train()   # ModelInputs(): input_ids, labels by bload.causal_labels, piece positions

The Trainer sets the sampler's epoch at each epoch's start. dataset is a bload.BlockDataset or
a map-style dataset of (data, target) pairs (wrapped in one with the sampler's t_max); the
loader's workers, pinning and prefetching are TrainingArguments' dataloader_* options.
"""

import warnings
from collections.abc import Mapping

import torch
import transformers

from bload.attention import piece_position_ids
from bload.dataset import BlockDataset, collate
from bload.fields import BATCH_FIELDS
from bload.integrations.accelerate import prepare_loader
from bload.labels import causal_labels
from bload.sampler import BlockSampler

__all__ = ["BlockTrainer", "ModelInputs"]


def _no_cache(batch):
    """use_cache=False: a module-level function, so ModelInputs pickles into spawned workers."""
    return False


class ModelInputs:
    """The loader's collate_fn: a PackedBatch as the model's keyword arguments, {argument: the
    batch field it takes} (any of bload.PackedBatch's fields), or {argument: function of the
    batch} for anything else (a key of dict data, a cast). The default is a packed causal LM's:
    input_ids from data; labels from target by bload.causal_labels (-100, the ignored label, at
    each piece's first step and on padding, so that the model's shifted loss never scores one
    document's step against the next one's first token); position_ids from 0 at every piece
    (bload.attention.piece_position_ids: how Hugging Face models whose mask creation reads
    position_ids find the pieces when no attention_mask is passed); and use_cache=False (a model
    that makes a cache does not look for the pieces: its eager and SDPA attention run across
    them). Not every architecture reads position_ids for the pieces (OPT, Bloom, Mamba and
    Mamba2 run across them in transformers 5.24): run bload.check_isolation on the model with
    these inputs before training it (docs/isolation.md gives the call).

    labels taken from the "target" (or "data") field as they are carry cross-document labels
    into a shifted loss: that mapping warns, naming causal_labels; a model that does not shift
    its labels passes `lambda batch: batch.target` to say so."""

    DEFAULT = {
        "input_ids": "data",
        "labels": causal_labels,
        "position_ids": piece_position_ids,
        "use_cache": _no_cache,
    }

    def __init__(self, fields=None):
        if fields is not None and not isinstance(fields, Mapping):
            raise TypeError(
                f"fields: expected a dict {{argument: batch field or function of the batch}}, "
                f"got {type(fields).__name__} {fields!r:.80}"
            )
        fields = dict(self.DEFAULT if fields is None else fields)
        for argument, field in fields.items():
            if not isinstance(argument, str):
                raise TypeError(
                    f"fields: argument {argument!r}: expected a keyword argument's name"
                )
            if not callable(field) and field not in BATCH_FIELDS:
                raise ValueError(
                    f"fields[{argument!r}] = {field!r}: expected one of the batch's fields "
                    f"({', '.join(BATCH_FIELDS)}) or a function of the batch"
                )
        if fields.get("labels") in ("target", "data"):
            warnings.warn(
                f"ModelInputs: labels = {fields['labels']!r}: a causal LM's shifted loss would "
                "score the last step of each packed piece against the next piece's first token; "
                "expected bload.causal_labels (the default), or `lambda batch: batch.target` for "
                "a model that does not shift its labels",
                UserWarning,
                stacklevel=2,
            )
        self.fields = fields

    def __call__(self, batch):
        batch = collate(batch)
        return {
            argument: field(batch) if callable(field) else getattr(batch, field)
            for argument, field in self.fields.items()
        }


class BlockTrainer(transformers.Trainer):
    """A transformers.Trainer whose train loader serves `train_sampler`'s batches (a
    bload.BlockSampler planned for the Trainer's processes), each as `model_inputs` makes
    the model's keyword arguments (ModelInputs() by default)."""

    def __init__(self, *args, train_sampler, model_inputs=None, **kwargs):
        if not isinstance(train_sampler, BlockSampler):
            raise TypeError(
                f"train_sampler: expected a bload.BlockSampler, got {type(train_sampler).__name__}"
            )
        self.train_sampler = train_sampler
        self.model_inputs = model_inputs if model_inputs is not None else ModelInputs()
        super().__init__(*args, **kwargs)

    def get_train_dataloader(self):
        if self.train_dataset is None:
            raise ValueError(
                "BlockTrainer: train_dataset = None: expected the dataset the sampler's lengths describe"
            )
        dataset = self.train_dataset
        if not isinstance(dataset, BlockDataset):
            dataset = BlockDataset(dataset, self.train_sampler.t_max)
        workers = self.args.dataloader_num_workers
        loader = torch.utils.data.DataLoader(
            dataset,
            batch_sampler=self.train_sampler,
            collate_fn=self.model_inputs,
            num_workers=workers,
            pin_memory=self.args.dataloader_pin_memory,
            persistent_workers=self.args.dataloader_persistent_workers and workers > 0,
            prefetch_factor=self.args.dataloader_prefetch_factor if workers > 0 else None,
        )
        return prepare_loader(self.accelerator, loader)
