"""Packed training equals unpacked training for a causal LM on every path bload offers: a tiny
random-weight Llama (float64) trained for an epoch of packed batches through a plain loop, the
Hugging Face Trainer (BlockTrainer's default ModelInputs), Lightning (BlockDataModule) and
accelerate (prepare_loader) ends with the same weights, to 1e-10 relative, as the same model
trained on the same batches' sequences each alone; the per-step losses agree too. Labels taken
from the target as they are (no bload.causal_labels) do not: that is the leak the rule closes."""

import bload
import pytest
import torch
from bload.attention import piece_position_ids

transformers = pytest.importorskip("transformers")

T_MAX, BLOCKS, VOCABULARY, LEARNING_RATE, SEED = 32, 2, 48, 0.2, 5
LENGTHS = [9, 14, 3, 20, 6, 11, 17, 5, 8, 13, 4, 10]
RELATIVE = 1e-10
# Hugging Face's own loss (the Trainer's) casts the logits to float32: the tolerance it allows.
FLOAT32_LOSS = 1e-6


# Tiny models on one thread (conftest.py's one_thread).
pytestmark = pytest.mark.usefixtures("one_thread")


class Tokens(torch.utils.data.Dataset):
    """Sequence i: token ids [T_i] drawn from seed i, its own labels (the model shifts them)."""

    def __getitem__(self, index):
        generator = torch.Generator().manual_seed(100 + index)
        tokens = torch.randint(0, VOCABULARY, (LENGTHS[index],), generator=generator)
        return tokens, tokens

    def __len__(self):
        return len(LENGTHS)


def llama():
    from models import tiny_llama

    return tiny_llama(VOCABULARY, T_MAX, seed=SEED)


def sampler():
    return bload.BlockSampler(LENGTHS, T_MAX, BLOCKS, seed=SEED)


def plan():
    """The epoch's sequences, batch by batch, as the sampler plans them."""
    column = bload.ops.COLUMN["sequence"]
    return [[row[column] for row in batch.table.tolist()] for batch in sampler()]


def sequence_loss(model, sequences):
    """The batch's token mean with every sequence run alone: summed losses over summed targets."""
    total, targets = 0.0, 0
    for index in sequences:
        tokens = Tokens()[index][0].unsqueeze(0)
        total = total + shifted_loss(model(input_ids=tokens).logits, tokens) * (len(tokens[0]) - 1)
        targets += len(tokens[0]) - 1
    return total / targets


def train_alone():
    """The reference: SGD on each batch's sequences run one at a time."""
    model, losses = llama(), []
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    for sequences in plan():
        loss = sequence_loss(model, sequences)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
    return model, losses


@pytest.fixture(scope="module")
def reference():
    return train_alone()


def loader():
    return torch.utils.data.DataLoader(
        bload.BlockDataset(Tokens(), T_MAX), batch_sampler=sampler(), collate_fn=bload.collate
    )


def shifted_loss(logits, labels):
    """A causal LM's token mean in float64: the output at step t scored against label t + 1,
    ignored labels (-100) left out. Hugging Face's own loss casts the logits to float32 first."""
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100
    )


def packed_loss(model, batch, labels=None):
    labels = bload.causal_labels(batch) if labels is None else labels
    logits = model(
        input_ids=batch.data,
        position_ids=piece_position_ids(batch),
        use_cache=False,  # else the model makes a cache and does not look for the pieces
    ).logits
    return shifted_loss(logits, labels)


def assert_same_weights(model, expected, relative=RELATIVE):
    for (name, ours), theirs in zip(model.named_parameters(), expected.parameters()):
        scale = float(theirs.detach().abs().max())
        change = float((ours.detach() - theirs.detach()).abs().max())
        assert change <= relative * scale, f"{name}: {change:.3g} apart (scale {scale:.3g})"


def test_causal_labels_ignore_each_pieces_first_step_and_the_padding():
    batch = next(iter(loader()))
    labels = bload.causal_labels(batch)
    starts = torch.zeros(BLOCKS, T_MAX, dtype=torch.bool)
    columns = [bload.ops.COLUMN[name] for name in ("block", "block_offset", "length")]
    for block, start, length in batch.table[:, columns].tolist():
        starts[block, start] = True
        assert torch.equal(
            labels[block, start + 1 : start + length],
            batch.target[block, start + 1 : start + length],
        )
    assert torch.equal(labels == -100, starts | ~batch.valid)
    assert len(batch.table) > BLOCKS, "no row with two pieces to test"
    with pytest.raises(TypeError, match="labels of dtype torch.float32: expected integer"):
        bload.causal_labels(batch, batch.target.float())
    with pytest.raises(ValueError, match=r"labels of shape \[3\]: expected \[blocks, t_max"):
        bload.causal_labels(batch, torch.zeros(3, dtype=torch.long))
    for ignore_index in ("x", -100.0, None, True):
        with pytest.raises(TypeError, match=f"ignore_index = {ignore_index!r}: expected an int"):
            bload.causal_labels(batch, ignore_index=ignore_index)


def test_a_plain_loop_trains_as_each_sequence_alone_and_raw_targets_do_not(reference):
    expected, losses = reference
    model = llama()
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    for step, batch in enumerate(loader()):
        if step == 0:  # the target as it is scores pieces against the next piece's first token
            raw = packed_loss(model, batch, labels=batch.target)
            assert abs(float(raw) - losses[0]) > 1e-6 * losses[0]
        loss = packed_loss(model, batch)
        assert abs(float(loss) - losses[step]) <= RELATIVE * losses[step]
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    assert_same_weights(model, expected)


def test_the_hf_trainer_with_the_default_model_inputs_trains_as_each_sequence_alone(
    reference, tmp_path
):
    from bload.integrations.transformers import BlockTrainer

    expected, losses = reference
    model = llama()
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        use_cpu=True,
        num_train_epochs=1,
        max_grad_norm=0.0,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        seed=SEED,
    )
    trainer = BlockTrainer(
        model=model,
        args=args,
        train_dataset=Tokens(),
        train_sampler=sampler(),
        optimizers=(optimizer, schedule),
    )
    result = trainer.train()
    mean = sum(losses) / len(losses)
    assert abs(result.training_loss - mean) <= FLOAT32_LOSS * mean
    assert_same_weights(model, expected, FLOAT32_LOSS)


def test_model_inputs_warn_when_labels_are_the_raw_target():
    from bload.integrations.transformers import ModelInputs

    with pytest.warns(UserWarning, match="labels = 'target': a causal LM's shifted loss"):
        ModelInputs({"input_ids": "data", "labels": "target"})


def test_lightning_trains_as_each_sequence_alone(reference):
    pl = pytest.importorskip("lightning.pytorch")
    from bload.integrations.lightning import BlockDataModule

    expected, losses = reference
    seen = []

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = llama()

        def training_step(self, batch, index):
            loss = packed_loss(self.model, batch)
            seen.append(float(loss.detach()))
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=LEARNING_RATE)

    module = Module()
    data = BlockDataModule(Tokens(), LENGTHS, T_MAX, BLOCKS, seed=SEED)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        precision="64-true",
        use_distributed_sampler=False,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, datamodule=data)
    assert len(seen) == len(losses)
    for ours, theirs in zip(seen, losses):
        assert abs(ours - theirs) <= RELATIVE * theirs
    assert_same_weights(module.model, expected)


def test_accelerate_trains_as_each_sequence_alone(reference):
    accelerate = pytest.importorskip("accelerate")
    from bload.integrations.accelerate import prepare_loader

    expected, losses = reference
    accelerator = accelerate.Accelerator(cpu=True)
    try:
        model = llama()
        optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
        prepared = prepare_loader(accelerator, loader())
        model, optimizer = accelerator.prepare(model, optimizer)
        for step, batch in enumerate(prepared):
            loss = packed_loss(model, batch)
            assert abs(float(loss) - losses[step]) <= RELATIVE * losses[step]
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        assert_same_weights(accelerator.unwrap_model(model), expected)
    finally:
        accelerate.state.AcceleratorState._reset_state(True)
