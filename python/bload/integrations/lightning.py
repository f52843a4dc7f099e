"""bload with Lightning: BlockDataModule, a LightningDataModule whose train loader is bload's.

Lightning replaces a loader's sampler with a DistributedSampler under DDP unless
Trainer(use_distributed_sampler=False); bload's sampler shards the batches itself, so the data
module refuses a Trainer that would replace it, naming the option:

    data = BlockDataModule(dataset, lengths, t_max, blocks_per_batch, seed=0, num_workers=2)
    trainer = lightning.pytorch.Trainer(strategy="ddp", use_distributed_sampler=False, ...)
    trainer.fit(model, datamodule=data)

The sampler plans for the Trainer's processes (world_size, global_rank), and the data module
sets its epoch as each training epoch starts (a callback it adds to the Trainer). Each
training_step gets a bload.PackedBatch, moved to the device by its to(). For mid-epoch
checkpoints with workers on, pass loader_class=torchdata.stateful_dataloader.StatefulDataLoader:
Lightning saves a stateful loader's state in its checkpoints (see bload.integrations.torchdata).
"""

import lightning.pytorch as pl
import torch

from bload.dataset import BlockDataset, collate
from bload.sampler import BlockSampler

__all__ = ["BlockDataModule"]


class BlockDataModule(pl.LightningDataModule):
    """Trains on `dataset` (a map-style dataset of (data, target) pairs, or a bload.BlockDataset)
    in the batches bload.BlockSampler(lengths, t_max, blocks_per_batch, seed=, policy=, split=)
    plans for the Trainer's ranks; `sampler_options` are BlockSampler's other keywords (cost=,
    max_pieces=, read_ahead=, ...). `loader_options` go to the loader (num_workers, pin_memory,
    ...), made by `loader_class` (torch's DataLoader by default)."""

    def __init__(
        self,
        dataset,
        lengths,
        t_max,
        blocks_per_batch=1,
        *,
        seed=0,
        policy="best_fit",
        split=False,
        sampler_options=None,
        loader_class=torch.utils.data.DataLoader,
        **loader_options,
    ):
        super().__init__()
        sampler_options = dict(sampler_options or {})
        for name in (
            "lengths",
            "t_max",
            "blocks_per_batch",
            "seed",
            "policy",
            "split",
            "world_size",
            "rank",
        ):
            if name in sampler_options:
                raise TypeError(
                    f"BlockDataModule: sampler_options[{name!r}] = {sampler_options[name]!r}: expected "
                    "it unset there: it is an argument of its own, or the Trainer's"
                )
        for name in (
            "batch_size",
            "shuffle",
            "sampler",
            "batch_sampler",
            "drop_last",
            "collate_fn",
        ):
            if name in loader_options:
                raise TypeError(
                    f"BlockDataModule: {name} = {loader_options[name]!r}: expected it unset: bload's sampler "
                    "makes the batches, packed"
                )
        self.dataset = (
            dataset if isinstance(dataset, BlockDataset) else BlockDataset(dataset, t_max)
        )
        self.options = {
            "lengths": lengths,
            "t_max": t_max,
            "blocks_per_batch": blocks_per_batch,
            "seed": seed,
            "policy": policy,
            "split": split,
            **sampler_options,
        }
        self.loader_class, self.loader_options = loader_class, loader_options
        self.sampler = None

    def setup(self, stage):
        if self.sampler is not None:
            return
        trainer = self.trainer
        world_size, rank = (
            (trainer.world_size, trainer.global_rank) if trainer is not None else (None, None)
        )
        if trainer is not None and _replaces_samplers(trainer):
            raise ValueError(
                "Trainer(use_distributed_sampler=True): Lightning replaces a loader's sampler with a "
                "DistributedSampler when it runs on several devices: expected Trainer(use_distributed_sampler=False): "
                "bload's BlockSampler shards the batches among the ranks itself"
            )
        if trainer is not None and not any(
            isinstance(c, _SamplerEpoch) and c.data is self for c in trainer.callbacks
        ):
            trainer.callbacks.append(_SamplerEpoch(self))
        options = dict(self.options)
        self.sampler = BlockSampler(
            options.pop("lengths"),
            options.pop("t_max"),
            options.pop("blocks_per_batch"),
            world_size=world_size,
            rank=rank,
            **options,
        )

    def train_dataloader(self):
        if self.sampler is None:
            self.setup("fit")
        return self.loader_class(
            self.dataset, batch_sampler=self.sampler, collate_fn=collate, **self.loader_options
        )


class _SamplerEpoch(pl.Callback):
    """Sets the sampler's epoch as each training epoch starts, before its loader is iterated:
    Lightning sets the epoch of a loader's sampler and of its batch sampler's sampler, not of the
    batch sampler itself."""

    def __init__(self, data):
        self.data = data

    def on_train_epoch_start(self, trainer, pl_module):
        self.data.sampler.set_epoch(trainer.current_epoch)


def _replaces_samplers(trainer):
    # Lightning keeps Trainer(use_distributed_sampler=) on its accelerator connector and has no
    # public accessor for it; it has stayed there since Lightning 2.0 (the refusal's test fails
    # if it moves).
    return trainer._accelerator_connector.use_distributed_sampler
