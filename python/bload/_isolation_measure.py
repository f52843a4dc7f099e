"""How check_isolation measures (bload/isolation.py): each document's steps in the batches, the
perturbed batches, the per-step outputs and their changes over documents' steps only, the
loss and gradients of a document's part, and the model's state (its buffers and modes) kept
as it was found."""

import math

import torch

from bload.batch import PackedBatch
from bload.ops import COLUMN


class _ModelState:
    """The model's buffers (each module's, by reference and by value) and each module's mode.
    fresh() gives every forward its own copy of the buffers as they were, so that a forward
    that updates one (batch norm's running statistics) changes neither the next forward nor
    the graph an earlier one kept for its gradients; restore() puts the model's own buffers
    back, with their values as they were, and each module's mode."""

    def __init__(self, model):
        self.buffers = [
            (module, name, tensor)
            for module in model.modules()
            for name, tensor in module._buffers.items()
        ]
        self.saved = {}  # id -> (tensor, its values), once per tensor (tied buffers stay tied)
        for _, _, tensor in self.buffers:
            if tensor is not None and id(tensor) not in self.saved:
                self.saved[id(tensor)] = (tensor, tensor.detach().clone())
        self.modes = [(module, module.training) for module in model.modules()]

    def fresh(self):
        copies = {key: saved.clone() for key, (_, saved) in self.saved.items()}
        for module, name, tensor in self.buffers:
            module._buffers[name] = None if tensor is None else copies[id(tensor)]

    def restore(self):
        with torch.no_grad():
            for module, name, tensor in self.buffers:
                module._buffers[name] = tensor
            for tensor, saved in self.saved.values():
                tensor.copy_(saved)
        for module, training in self.modes:
            module.training = training


def _document_steps(batches):
    """{sequence: {batch index: [(row, first step, steps), ...]}} from the batches' tables."""
    steps = {}
    for index, batch in enumerate(batches):
        columns = [COLUMN[name] for name in ("sequence", "block", "block_offset", "length")]
        for sequence, row, start, length in batch.table[:, columns].tolist():
            steps.setdefault(sequence, {}).setdefault(index, []).append((row, start, length))
    return steps


def _perturbed(batch, places, perturb, generator):
    def change(tensor):
        tensor = tensor.clone()
        for row, start, length in places:
            original = tensor[row, start : start + length]
            new = (perturb or _default_perturb)(original.cpu(), generator)
            tensor[row, start : start + length] = new.to(tensor.device, tensor.dtype)
        return tensor

    data = batch.data
    data = (
        {key: change(value) for key, value in data.items()}
        if isinstance(data, dict)
        else change(data)
    )
    return PackedBatch(
        data, batch.target, batch.table, batch.blocks, batch.t_max, **batch._options()
    )


def _default_perturb(steps, generator):
    if steps.is_floating_point():
        spread = max(float(steps.abs().max()) if steps.numel() else 0.0, 1.0)
        noise = torch.randn(steps.shape, generator=generator, dtype=torch.float64)
        return steps + (noise * spread).to(steps.dtype)
    if steps.dtype == torch.bool:
        return ~steps
    # Another id below the largest seen, never the same one: token ids stay valid for an
    # embedding sized to the data.
    vocabulary = max(int(steps.max()) + 1 if steps.numel() else 2, 2)
    shift = torch.randint(1, vocabulary, steps.shape, generator=generator)
    return (steps.long() + shift) % vocabulary


def _tensor_of(output):
    if hasattr(output, "logits"):
        output = output.logits
    elif isinstance(output, (tuple, list)):
        output = output[0]
    if not isinstance(output, torch.Tensor):
        raise TypeError(
            f"forward returned {type(output).__name__}: expected a tensor of per-step outputs "
            "(or an object with .logits, or a tuple whose first element is one)"
        )
    return output


def _per_step(output, batch):
    """The output as [blocks, t_max, ...], from either layout."""
    blocks, t_max = batch.blocks, batch.t_max
    if output.dim() >= 2 and tuple(output.shape[:2]) == (blocks, t_max):
        return output
    valid = batch.valid.flatten().to(output.device)
    flat = output[0] if output.dim() >= 2 and output.shape[0] == 1 else output
    if flat.shape[0] != int(valid.sum()):
        raise ValueError(
            f"an output of shape {list(output.shape)}: expected [blocks, t_max, ...] = "
            f"[{blocks}, {t_max}, ...] or the batch's {int(valid.sum())} valid steps flattened"
        )
    full = flat.new_zeros((blocks * t_max, *flat.shape[1:]))
    full = full.index_copy(0, valid.nonzero().flatten(), flat)
    return full.view(blocks, t_max, *flat.shape[1:])


def _document_scale(outputs, steps):
    """The largest absolute baseline output over the documents' steps (padding is never read);
    a ValueError naming the first document step whose output is not finite."""
    scale = 0.0
    for index, output in enumerate(outputs):
        mask = torch.zeros(output.shape[:2], dtype=torch.bool)
        for places in steps.values():
            for row, start, length in places.get(index, []):
                mask[row, start : start + length] = True
        values = output.detach()[mask.to(output.device)]
        if not values.numel():
            continue
        if values.is_floating_point() or values.is_complex():
            if not bool(torch.isfinite(values).all()):
                raise ValueError(_not_finite(output, steps, index))
        scale = max(scale, float(values.abs().max()))
    return scale


def _not_finite(output, steps, index):
    for sequence, places in sorted(steps.items()):
        for row, start, length in places.get(index, []):
            finite = torch.isfinite(output.detach()[row, start : start + length])
            bad = (~finite).reshape(length, -1).any(1).nonzero().flatten()
            if bad.numel():
                step = start + int(bad[0])
                value = output.detach()[row, step].flatten()[~finite[step - start].flatten()][0]
                return (
                    f"forward's baseline output is {float(value)} at sequence {sequence}'s step "
                    f"(batch {index}, row {row}, step {step}): expected finite outputs at every "
                    "document step, so that a change can be measured (padding steps may hold "
                    "anything)"
                )
    return "forward's baseline output is not finite at a document step"


def _change(before, after, places):
    """The largest absolute change over a document's steps (inf where it is not a number), and
    (batch, row) where it is."""
    largest, where = 0.0, (None, None)
    for index, spans in places.items():
        for row, start, length in spans:
            delta = (
                after[index][row, start : start + length].detach()
                - before[index][row, start : start + length].detach()
            )
            value = _nan_is_inf(float(delta.abs().max())) if delta.numel() else 0.0
            if value > largest:
                largest, where = value, (index, row)
    return largest, where


def _loss(outputs, weights, steps, documents):
    total = None
    for document in documents:
        for index, spans in steps[document].items():
            for row, start, length in spans:
                part = (
                    outputs[index][row, start : start + length]
                    * weights[index][row, start : start + length]
                ).sum()
                total = part if total is None else total + part
    return total


def _grads(loss, parameters):
    if loss is None or not loss.requires_grad:
        return [torch.zeros_like(p) for p in parameters]
    grads = torch.autograd.grad(loss, parameters, retain_graph=True, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for g, p in zip(grads, parameters)]


def _max_abs(tensors):
    return max((_nan_is_inf(float(t.abs().max())) for t in tensors if t.numel()), default=0.0)


def _nan_is_inf(value):
    """NaN compares false with everything: as a change, it is the largest."""
    return math.inf if math.isnan(value) else value


def _generator(seed):
    generator = torch.Generator()
    generator.manual_seed(seed)
    return generator


def _cuda_devices(batches):
    devices = {
        batch.device.index or 0
        for batch in batches
        if batch.device is not None and batch.device.type == "cuda"
    }
    return sorted(devices)
