"""One rank of the frameworks' training runs over bload's sampler, started by torchrun (gloo, CPU):
`integration_ranks.py FRAMEWORKS OUT` trains two epochs with each framework of FRAMEWORKS
(accelerate,transformers,lightning) in turn and writes OUT/<framework>-rank<r>.json:
{"world_size", "rank", "epochs": {epoch: [the block tables the model got]}}, which the test
compares with the plan."""

import json
import os
import pathlib
import sys

import bload
import torch
from integration_support import BLOCKS, SEED, T_MAX, Numbered, lengths_of

LENGTHS = lengths_of(60, seed=5)
EPOCHS = 2


class Recorder(torch.nn.Module):
    """A model of one weight that records the block table of each batch it trains on."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.epoch, self.seen = 0, {}

    def loss(self, data, table):
        self.seen.setdefault(self.epoch, []).append(table.tolist())
        return ((data.float() * 0 + self.weight - 1) ** 2).mean()


def accelerate_run(model):
    from accelerate import Accelerator
    from bload.integrations.accelerate import prepare_loader

    accelerator = Accelerator(cpu=True)
    sampler = bload.BlockSampler(LENGTHS, T_MAX, BLOCKS, seed=SEED)  # ranks from torch.distributed
    loader = torch.utils.data.DataLoader(
        bload.BlockDataset(Numbered(LENGTHS), T_MAX),
        batch_sampler=sampler,
        collate_fn=bload.collate,
        num_workers=1,
    )
    loader = prepare_loader(accelerator, loader)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ddp, optimizer, again = accelerator.prepare(model, optimizer, loader)
    assert again is loader, "accelerator.prepare re-prepared bload's loader"
    for epoch in range(EPOCHS):
        model.epoch = epoch
        sampler.set_epoch(epoch)
        for batch in loader:
            optimizer.zero_grad()
            accelerator.backward(model.loss(batch.data, batch.table))
            optimizer.step()
    # What accelerator.prepare does to a bload loader on its own: sharded again, refused.
    sharded = accelerator.prepare(
        torch.utils.data.DataLoader(
            bload.BlockDataset(Numbered(LENGTHS), T_MAX),
            batch_sampler=sampler,
            collate_fn=bload.collate,
        )
    )
    try:
        prepare_loader(accelerator, sharded)
    except ValueError as error:
        return {"refused": str(error)}
    return {"refused": None}


def transformers_run(model, out):
    from bload.integrations.transformers import BlockTrainer, ModelInputs
    from transformers import TrainerCallback, TrainingArguments

    class Forward(torch.nn.Module):
        def __init__(self, recorder):
            super().__init__()
            self.recorder = recorder

        def forward(self, input_ids, labels, position_ids, use_cache, table):
            assert input_ids.shape == labels.shape[:2] + (1,) == position_ids.shape + (1,)
            assert use_cache is False
            return {"loss": self.recorder.loss(input_ids, table)}

    class Epochs(TrainerCallback):
        def on_epoch_begin(self, args, state, control, **kwargs):
            model.epoch = round(state.epoch)

    args = TrainingArguments(
        output_dir=str(out / "trainer"),
        use_cpu=True,
        ddp_backend="gloo",
        num_train_epochs=EPOCHS,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        learning_rate=0.1,
        dataloader_num_workers=1,
        disable_tqdm=True,
        seed=SEED,
    )
    sampler = bload.BlockSampler(LENGTHS, T_MAX, BLOCKS, seed=SEED)
    inputs = ModelInputs({**ModelInputs.DEFAULT, "table": "table"})
    trainer = BlockTrainer(
        model=Forward(model),
        args=args,
        train_dataset=Numbered(LENGTHS),
        train_sampler=sampler,
        model_inputs=inputs,
        callbacks=[Epochs()],
    )
    trainer.train()
    return {}


def lightning_run(model):
    import lightning.pytorch as pl
    from bload.integrations.lightning import BlockDataModule

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.recorder = model

        def on_train_epoch_start(self):
            model.epoch = self.current_epoch

        def training_step(self, batch, index):
            assert isinstance(batch, bload.PackedBatch)
            return model.loss(batch.data, batch.table)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = BlockDataModule(Numbered(LENGTHS), LENGTHS, T_MAX, BLOCKS, seed=SEED, num_workers=1)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=int(os.environ["WORLD_SIZE"]),
        strategy="ddp",
        max_epochs=EPOCHS,
        use_distributed_sampler=False,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Module(), datamodule=data)
    return {}


def main(frameworks, out):
    """Runs each framework of `frameworks` (comma-separated) in turn, in this rank's process: one
    start of the processes (and of torch) for all of them."""
    out = pathlib.Path(out)
    for framework in frameworks.split(","):
        model = Recorder()
        if framework == "accelerate":
            extra = accelerate_run(model)
        elif framework == "transformers":
            extra = transformers_run(model, out)
        else:
            extra = lightning_run(model)
        rank, world_size = torch.distributed.get_rank(), torch.distributed.get_world_size()
        report = {
            "world_size": world_size,
            "rank": rank,
            "epochs": {str(e): t for e, t in model.seen.items()},
            **extra,
        }
        (out / f"{framework}-rank{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main(*sys.argv[1:])
