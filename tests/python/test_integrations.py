"""bload.integrations with accelerate, the HF Trainer and Lightning: two gloo ranks (torchrun, CPU)
train two epochs each and every rank's model gets exactly its plan's batches, epoch by epoch;
and what each integration refuses. (torchdata: test_integration_torchdata.py.)"""

import json
import os
import pickle
import subprocess

import bload
import pytest
import torch
from conftest import ROOT, child_env, run_python
from ddp_support import HARD_TIMEOUT, torchrun
from integration_support import BLOCKS, SEED, T_MAX, Numbered, lengths_of, plan_tables

HERE = ROOT / "tests" / "python"


FRAMEWORKS = ("accelerate", "transformers", "lightning")


@pytest.fixture(scope="module")
def two_rank_reports(tmp_path_factory):
    """Every framework's run on two ranks, in one torchrun launch (the frameworks' imports are
    most of the time): {framework: [rank 0's report, rank 1's]}."""
    out = tmp_path_factory.mktemp("ranks")
    command = torchrun(
        [HERE / "integration_ranks.py", ",".join(FRAMEWORKS), out], out / "logs", ranks_per_node=2
    )
    env = child_env(OMP_NUM_THREADS="1")  # this directory is on sys.path: pytest's rootdir
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=HARD_TIMEOUT, env=env, cwd=out
    )
    reports = {}
    for framework in FRAMEWORKS:
        paths = [out / f"{framework}-rank{rank}.json" for rank in range(2)]
        reports[framework] = (
            [json.loads(path.read_text()) for path in paths]
            if all(map(os.path.exists, paths))
            else None
        )
    reports["failure"] = (
        None if result.returncode == 0 else result.stdout[-2000:] + result.stderr[-4000:]
    )
    return reports


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_two_ranks_train_on_exactly_their_plans_batches(framework, two_rank_reports):
    from integration_ranks import EPOCHS, LENGTHS

    reports = two_rank_reports[framework]
    assert reports is not None, f"{framework} wrote no report: {two_rank_reports['failure']}"
    for rank, report in enumerate(reports):
        assert (report["world_size"], report["rank"]) == (2, rank)
        assert sorted(report["epochs"]) == [str(epoch) for epoch in range(EPOCHS)]
        for epoch, tables in report["epochs"].items():
            expected = plan_tables(LENGTHS, 2, rank, int(epoch))
            assert tables == [table.tolist() for table in expected], f"rank {rank}, epoch {epoch}"
    if framework == "accelerate":  # accelerator.prepare's own sharding of a bload loader: refused
        assert all(
            "shards this rank's batches a second time" in report["refused"] for report in reports
        )


def test_the_two_rank_run_ends_cleanly(two_rank_reports):
    assert two_rank_reports["failure"] is None, two_rank_reports["failure"]


def test_accelerate_refuses_a_sampler_planned_for_other_processes_and_a_loader_without_one():
    from accelerate import Accelerator
    from accelerate.data_loader import BatchSamplerShard
    from bload.integrations.accelerate import prepare_loader

    accelerator = Accelerator(cpu=True)
    lengths = lengths_of(30)
    dataset = bload.BlockDataset(Numbered(lengths), T_MAX)
    two = bload.BlockSampler(lengths, T_MAX, BLOCKS, world_size=2, rank=0)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=two, collate_fn=bload.collate)
    expected = (
        "plans for world_size 2, rank 0: expected the accelerator's processes, num_processes 1"
    )
    with pytest.raises(ValueError, match=expected):
        prepare_loader(accelerator, loader)
    sharded = torch.utils.data.DataLoader(
        dataset, batch_sampler=BatchSamplerShard(two, 2, 0), collate_fn=bload.collate
    )
    with pytest.raises(
        ValueError, match="BatchSamplerShard over a bload.BlockSampler of world_size 2: it shards"
    ):
        prepare_loader(accelerator, sharded)
    with pytest.raises(
        TypeError, match="expected a DataLoader with batch_sampler=bload.BlockSampler"
    ):
        prepare_loader(accelerator, torch.utils.data.DataLoader(Numbered(lengths), batch_size=2))
    one = bload.BlockSampler(lengths, T_MAX, BLOCKS, seed=SEED)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=one, collate_fn=bload.collate)
    prepared = prepare_loader(accelerator, loader)
    assert prepared.batch_sampler is one and accelerator.prepare(prepared) is prepared
    assert [batch.table.tolist() for batch in prepared] == [
        table.tolist() for table in plan_tables(lengths, 1, 0, 0)
    ]


def test_accelerate_serves_the_epoch_set_after_a_resume_a_break_or_a_skip():
    """accelerate's loader sets its sampler's epoch to its own count of finished iterations as
    each starts: 0 in a new process, not moved by a break. The epoch set is served instead."""
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration
    from bload.integrations.accelerate import prepare_loader
    from torchdata.stateful_dataloader import StatefulDataLoader

    lengths = lengths_of(24, seed=3)
    plans = [[table.tolist() for table in plan_tables(lengths, 1, 0, epoch)] for epoch in range(3)]

    def fresh(stateful=False):  # as a new process makes it: accelerate's count at 0
        config = DataLoaderConfiguration(use_stateful_dataloader=stateful)
        accelerator = Accelerator(cpu=True, dataloader_config=config)
        sampler = bload.BlockSampler(lengths, T_MAX, BLOCKS, seed=SEED)
        kind = StatefulDataLoader if stateful else torch.utils.data.DataLoader
        dataset = bload.BlockDataset(Numbered(lengths), T_MAX)
        loader = kind(dataset, batch_sampler=sampler, collate_fn=bload.collate)
        return accelerator, sampler, prepare_loader(accelerator, loader)

    def served(loader):
        return [batch.table.tolist() for batch in loader]

    # Resumed at epoch 1 (the checkpoint made after epoch 0), plain: the sampler's epochs.
    _, sampler, loader = fresh()
    for epoch in (1, 2):
        sampler.set_epoch(epoch)
        assert served(loader) == plans[epoch], epoch
    # A break in each epoch: the next epoch is still the one set.
    _, sampler, loader = fresh()
    for epoch in range(3):
        sampler.set_epoch(epoch)
        assert next(iter(loader)).table.tolist() == plans[epoch][0], epoch
    # skip_first_batches for the resumed epoch's first batches, then the loader itself.
    accelerator, sampler, loader = fresh()
    sampler.set_epoch(1)
    assert served(accelerator.skip_first_batches(loader, 2)) == plans[1][2:]
    sampler.set_epoch(2)
    assert served(loader) == plans[2]
    # accelerate's own ways stay: its count moves the epoch on after a whole iteration, and
    # loader.set_epoch (the HF Trainer's) sets it.
    _, sampler, loader = fresh()
    assert [served(loader) for _ in range(3)] == plans
    loader.set_epoch(1)
    assert served(loader) == plans[1]
    # Stateful: the loader's state (what accelerator.save_state keeps) after epoch 0 ended, and
    # one within epoch 1, each loaded into a fresh loader.
    _, sampler, loader = fresh(stateful=True)
    states = []
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        for index, _ in enumerate(loader):
            if epoch == 1 and index == 1:
                states.append(pickle.loads(pickle.dumps(loader.state_dict())))
        if epoch == 0:
            states.append(pickle.loads(pickle.dumps(loader.state_dict())))
    for state, first_epoch, first in zip(states, (1, 1), (plans[1], plans[1][2:])):
        _, sampler, loader = fresh(stateful=True)
        loader.load_state_dict(state)
        sampler.set_epoch(first_epoch)
        assert served(loader) == first
        sampler.set_epoch(2)
        assert served(loader) == plans[2]


def test_lightning_refuses_use_distributed_sampler_by_name():
    import lightning.pytorch as pl
    from bload.integrations.lightning import BlockDataModule

    lengths = lengths_of(30)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    data = BlockDataModule(Numbered(lengths), lengths, T_MAX, BLOCKS)
    data.trainer = trainer
    expected = r"Trainer\(use_distributed_sampler=True\): .* expected Trainer\(use_distributed_sampler=False\)"
    with pytest.raises(ValueError, match=expected):
        data.setup("fit")
    with pytest.raises(TypeError, match="batch_size = 4: expected it unset"):
        BlockDataModule(Numbered(lengths), lengths, T_MAX, batch_size=4)


@pytest.mark.parametrize("workers", [0, 2])
def test_lightning_with_a_stateful_loader_resumes_a_mid_epoch_checkpoint_exactly(tmp_path, workers):
    import lightning.pytorch as pl
    from bload.integrations.lightning import BlockDataModule
    from torchdata.stateful_dataloader import StatefulDataLoader

    lengths, seen = lengths_of(60, seed=5), []

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1))

        def training_step(self, batch, index):
            seen.append(batch.table.tolist())
            return (self.weight - 1).pow(2).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class SaveAtStep5(pl.Callback):
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step == 5:
                trainer.save_checkpoint(tmp_path / "step5.ckpt")

    def fit(callbacks=(), checkpoint=None):
        data = BlockDataModule(
            Numbered(lengths),
            lengths,
            T_MAX,
            BLOCKS,
            seed=SEED,
            num_workers=workers,
            loader_class=StatefulDataLoader,
        )
        trainer = pl.Trainer(
            accelerator="cpu",
            devices=1,
            max_epochs=2,
            use_distributed_sampler=False,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=list(callbacks),
        )
        trainer.fit(Module(), datamodule=data, ckpt_path=checkpoint)

    fit([SaveAtStep5()])
    whole = [table.tolist() for epoch in range(2) for table in plan_tables(lengths, 1, 0, epoch)]
    assert seen == whole
    seen.clear()
    # Workers had fetched past batch 5. Without them the loader loads the state as Lightning
    # starts its iterator, before it takes the loader's length for every epoch: the epoch's.
    fit(checkpoint=tmp_path / "step5.ckpt")
    assert seen == whole[5:]


def test_model_inputs_name_the_batch_fields_and_refuse_others():
    from bload.integrations.transformers import ModelInputs

    lengths = lengths_of(30)
    first = next(iter(bload.BlockSampler(lengths, T_MAX, BLOCKS)))
    batch = bload.BlockDataset(Numbered(lengths), T_MAX).__getitems__(first)
    inputs = ModelInputs({**ModelInputs.DEFAULT, "steps": lambda packed: packed.valid.sum()})(batch)
    assert sorted(inputs) == ["input_ids", "labels", "position_ids", "steps", "use_cache"]
    assert inputs["use_cache"] is False
    assert torch.equal(inputs["labels"], bload.causal_labels(batch))
    assert inputs["input_ids"] is batch.data and torch.equal(
        inputs["position_ids"], batch.position_ids
    )
    assert int(inputs["steps"]) == sum(row[2] for row in batch.table.tolist())
    with pytest.raises(
        ValueError, match=r"fields\['mask'\] = 'mask': expected one of the batch's fields \(data, "
    ):
        ModelInputs({"mask": "mask"})
    for fields in (["input_ids"], "data", [("input_ids", "data")]):
        with pytest.raises(TypeError, match=r"fields: expected a dict \{argument: "):
            ModelInputs(fields)


def test_importing_bload_imports_no_framework():
    code = (
        "import sys, bload, bload.integrations\n"
        "frameworks = ['accelerate', 'transformers', 'lightning', 'torchdata']\n"
        "print([name for name in frameworks if name in sys.modules])"
    )
    result = run_python(code)
    assert result.returncode == 0 and result.stdout.strip() == "[]", result.stderr[-2000:]


def test_lightning_passes_the_samplers_other_options():
    from bload.integrations.lightning import BlockDataModule

    lengths = lengths_of(40)
    data = BlockDataModule(
        Numbered(lengths), lengths, T_MAX, BLOCKS, sampler_options={"max_pieces": 1}
    )
    data.setup("fit")
    capped = bload.BlockSampler(lengths, T_MAX, BLOCKS, max_pieces=1)
    assert [batch.table.tolist() for batch in data.sampler] == [
        batch.table.tolist() for batch in capped
    ]
    assert all(len(batch.table) <= BLOCKS for batch in data.sampler)
    with pytest.raises(TypeError, match=r"sampler_options\['seed'\] = 3: expected it unset there"):
        BlockDataModule(Numbered(lengths), lengths, T_MAX, sampler_options={"seed": 3})
