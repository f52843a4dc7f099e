"""Labels for a causal language model's shifted loss on packed rows: the one rule every place
bload hands a model labels follows (ModelInputs' default, PackedBatch.hf_kwargs, the framework
recipes).

A causal LM shifts its labels inside its loss: the output at step t is scored against the label
at step t + 1 of the same row. In a packed row the step after a piece's last step is the first
step of the next piece, another document, so left as it is the loss teaches the model to predict
one document's first token from the end of another (transformers' DataCollatorWithFlattening
masks it for the same reason). The rule: the label at every piece's first step is the ignored
label, and so is every padding step. A row's first step is a piece's first step (or padding),
so it is masked too: no output is ever scored against it, and counting the labels that are not
ignored (as the HF Trainer does for num_items_in_batch) counts exactly the targets scored.
"""

import numbers

import torch

from bload.ops import COLUMN

__all__ = ["IGNORE_INDEX", "causal_labels", "piece_starts"]

#: The label a loss ignores: torch.nn.CrossEntropyLoss's and Hugging Face's default.
IGNORE_INDEX = -100


def piece_starts(batch):
    """bool [blocks, t_max]: true at the first step of every piece of the batch (a sequence's
    start, or where a split sequence goes on), on the batch's device."""
    starts = torch.zeros(batch.blocks, batch.t_max, dtype=torch.bool)
    table = batch.table
    starts[table[:, COLUMN["block"]], table[:, COLUMN["block_offset"]]] = True
    return starts if batch.device is None else starts.to(batch.device)


def causal_labels(batch, labels=None, ignore_index=IGNORE_INDEX):
    """The labels of a causal LM's shifted loss for `batch`: `labels` ([blocks, t_max, ...],
    default batch.target) with `ignore_index` at the first step of every piece and at every
    padding step, so that no step is scored against another document's token. A new tensor;
    `labels` is left as it is.

        model(input_ids=batch.data, labels=bload.causal_labels(batch),
              position_ids=batch.position_ids)

    For a model that does not shift (its target at step t is scored at step t, as a recurrent
    model's is), use batch.target and batch.valid instead."""
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, numbers.Integral):
        raise TypeError(
            f"ignore_index = {ignore_index!r}: expected an int, the label the loss ignores "
            f"(default {IGNORE_INDEX})"
        )
    labels = batch.target if labels is None else labels
    if isinstance(labels, dict):
        raise TypeError(
            "labels: a dict of tensors (the dataset's items were dicts): expected one tensor "
            "[blocks, t_max]; pass labels=batch.target[key]"
        )
    if tuple(labels.shape[:2]) != (batch.blocks, batch.t_max):
        raise ValueError(
            f"labels of shape {list(labels.shape)}: expected [blocks, t_max, ...] = "
            f"[{batch.blocks}, {batch.t_max}, ...], the batch's shape"
        )
    if labels.is_floating_point() or labels.dtype == torch.bool:
        raise TypeError(
            f"labels of dtype {labels.dtype}: expected integer class labels (a causal LM's "
            "token ids); a model scored on every step's own target uses batch.valid instead"
        )
    ignored = piece_starts(batch).to(labels.device) | ~batch.valid.to(labels.device)
    while ignored.dim() < labels.dim():
        ignored = ignored.unsqueeze(-1)
    return labels.masked_fill(ignored, ignore_index)
