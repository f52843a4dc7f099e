"""Is my model isolated? A leak probe for a user's own model on bload's packed batches.

Packing is only correct when nothing of one document reaches another: a recurrent state that is
not reset where a piece starts, attention without the document mask, a state kernel whose
initial states are not routed by state_in. Such a leak trains silently (the loss still falls).
check_isolation perturbs the input steps of one document at a time and reports every other
document whose outputs, or whose share of the parameters' gradients, changed:

    report = bload.check_isolation(model, batch, lambda model, batch: model(batch.data, batch.table))
    print(report)                  # "isolated: ..." or each leak, largest first
    bload.assert_isolated(model, batch, forward)      # the same, as an AssertionError (pytest)

A document is a sequence of the plan (the table's `sequence` column): its pieces may span rows
(split) and batches (lanes), and may reach each other; nothing else may. For state carried
across batches, pass consecutive batches as a list and a forward that runs them in order from a
fresh state, returning one output per batch.

The probe runs the model in the mode it is in (model.train() for the leaks training has, such as
batch norm's statistics over the batch), and leaves its buffers and modes as it found them.
"""

import math
import numbers
from typing import NamedTuple

import torch

from bload._isolation_measure import (
    _change,
    _cuda_devices,
    _document_scale,
    _document_steps,
    _generator,
    _grads,
    _loss,
    _max_abs,
    _ModelState,
    _per_step,
    _perturbed,
    _tensor_of,
)

__all__ = ["IsolationReport", "Leak", "assert_isolated", "check_isolation"]


class Leak(NamedTuple):
    """Perturbing sequence `source` changed sequence `affected`'s `kind` ("outputs" or
    "gradients") by `change`, relative to the largest baseline value; `batch` and `row` locate
    the largest change of outputs (None for gradients)."""

    source: int
    affected: int
    kind: str
    change: float
    batch: object = None
    row: object = None


class IsolationReport:
    """What check_isolation found: `leaks` (largest change first), the `documents` probed,
    `largest` (the largest change of any other document seen, leak or not; inf where a change
    made an output not finite), the `tolerance`, and `training`, the mode the model was probed
    in (model.training). `ok` is true when nothing leaked."""

    def __init__(self, leaks, documents, largest, tolerance, training=True):
        self.leaks = sorted(leaks, key=lambda leak: -leak.change)
        self.documents, self.largest, self.tolerance = documents, largest, tolerance
        self.training = training

    @property
    def ok(self):
        return not self.leaks

    def __bool__(self):
        return self.ok

    def __str__(self):
        mode = (
            ""
            if self.training
            else " (model in eval mode: leaks only training has, such as batch norm's statistics "
            "over the batch, were not probed)"
        )
        if self.ok:
            return (
                f"isolated: perturbing each of {self.documents} documents changed no other "
                f"document's outputs or gradients by more than {self.tolerance:g} (largest "
                f"change {self.largest:.3g}){mode}"
            )
        sources = len({leak.source for leak in self.leaks})
        lines = [
            f"leaks: perturbing {sources} of {self.documents} documents changed others "
            f"beyond {self.tolerance:g} ({len(self.leaks)} pairs; largest change "
            f"{self.largest:.3g}){mode}:"
        ]
        for leak in self.leaks[:20]:
            where = "" if leak.batch is None else f" (batch {leak.batch}, row {leak.row})"
            lines.append(
                f"  sequence {leak.source} -> sequence {leak.affected}: {leak.kind} changed by "
                f"{leak.change:.3g}{where}"
            )
        if len(self.leaks) > 20:
            lines.append(f"  ... and {len(self.leaks) - 20} more")
        return "\n".join(lines)

    __repr__ = __str__


def check_isolation(
    model,
    batches,
    forward=None,
    *,
    tolerance=1e-6,
    gradients=True,
    documents=None,
    perturb=None,
    seed=0,
):
    """Probes `model` on `batches` (a bload.PackedBatch, or a list of one rank's consecutive
    batches) and returns an IsolationReport.

    forward(model, batch) -> the model's per-step outputs for one batch, or with a list,
    forward(model, batches) -> one output per batch, run in order from a fresh state. Default:
    model(batch). An output is a tensor [blocks, t_max, ...], or flattened as Hugging Face's
    padding-free path gives it ([1, valid steps, ...] or [valid steps, ...] in block then step
    order); an object with `.logits`, or a tuple, gives its logits or first element.

    Each document (sequence id) in `documents` (default: every one in the batches) in turn has
    its data steps perturbed by perturb(steps, generator) -> new steps (default: noise for
    floating data, other ids below the data's largest for integer data); any other document
    whose outputs change by more than `tolerance` (a finite number >= 0) times the largest
    baseline output leaks. With `gradients`, so does one whose part of the loss (a fixed random
    weighting of its outputs) has parameter gradients that change by more than `tolerance` times
    the largest. The random generators are reseeded from `seed` before every forward, so dropout
    is the same each time.

    Only the documents' steps are read: padding outputs (masked with -inf, NaN or anything
    else) are never compared and never set the scale. A document step whose baseline output is
    not finite is a ValueError naming it (no change can be measured there), and so are baseline
    gradients that are not finite; an output or gradient that a perturbation makes not finite
    is a leak of change inf.

    The model runs in the mode it is in: call model.train() first to probe what training runs
    (the report says when it probed a model in eval mode). Every forward starts from the model's
    buffers as they were (batch norm's running statistics, say), and the buffers and each
    module's mode are put back at the end; the parameters and their .grad are not written.
    Cost: one forward per document, and with gradients about two backward passes per document.
    """
    if isinstance(tolerance, bool) or not isinstance(tolerance, numbers.Real):
        raise TypeError(
            f"tolerance = {tolerance!r}: expected a number >= 0 (the largest change allowed, "
            "relative to the largest baseline value)"
        )
    if not (math.isfinite(tolerance) and tolerance >= 0):
        raise ValueError(
            f"tolerance = {tolerance!r}: expected a finite number >= 0 (the largest change "
            "allowed, relative to the largest baseline value)"
        )
    single = not isinstance(batches, (list, tuple))
    batches = [batches] if single else list(batches)
    if not batches:
        raise ValueError("batches: an empty list: expected a PackedBatch or a list of them")
    call = forward if forward is not None else (lambda model, batch: model(batch))
    if single:
        run = lambda model, batches: [call(model, batches[0])]  # noqa: E731
    else:
        run = call
    steps = _document_steps(batches)
    probed = sorted(steps) if documents is None else [int(d) for d in documents]
    for document in probed:
        if document not in steps:
            raise ValueError(
                f"documents: sequence {document} is in none of the batches: expected one of "
                f"their table's sequences ({sorted(steps)[:10]}...)"
            )
    state = _ModelState(model)
    try:
        return _probe(
            model, batches, run, steps, probed, state, tolerance, gradients, perturb, seed
        )
    finally:
        state.restore()


def _probe(model, batches, run, steps, probed, state, tolerance, gradients, perturb, seed):
    parameters = [p for p in model.parameters() if p.requires_grad] if gradients else []

    def outputs_of(trial_batches):
        state.fresh()
        with torch.random.fork_rng(devices=_cuda_devices(trial_batches)):
            torch.manual_seed(seed)
            with torch.set_grad_enabled(bool(parameters)):  # no graph when none is read
                produced = run(model, trial_batches)
        if len(produced) != len(batches):
            raise ValueError(
                f"forward returned {len(produced)} outputs for {len(batches)} batches: expected one each"
            )
        return [_per_step(_tensor_of(out), batch) for out, batch in zip(produced, batches)]

    baseline = outputs_of(batches)
    scale = _document_scale(baseline, steps) or 1.0
    weights = [
        torch.randn(out.shape, generator=_generator(seed), dtype=out.dtype).to(out.device)
        for out in baseline
    ]
    base_grads = {}  # each document's own part, made when a leak is to be located

    def base_grad(document):
        if document not in base_grads:
            base_grads[document] = _grads(_loss(baseline, weights, steps, [document]), parameters)
        return base_grads[document]

    if parameters:
        grad_scale = _max_abs(_grads(_loss(baseline, weights, steps, list(steps)), parameters))
        if not math.isfinite(grad_scale):
            raise ValueError(
                "gradients: the parameters' gradients of the documents' baseline loss are not "
                "finite, so no change of them can be measured; expected finite gradients, or "
                "gradients=False to probe the outputs only"
            )
        grad_scale = grad_scale or 1.0

    leaks, largest = [], 0.0
    for document in probed:
        generator = _generator(seed + 1 + document)
        trial = [
            _perturbed(batch, steps[document].get(index, []), perturb, generator)
            for index, batch in enumerate(batches)
        ]
        outputs = outputs_of(trial)
        others = [other for other in steps if other != document]
        for other in others:
            change, place = _change(baseline, outputs, steps[other])
            largest = max(largest, change / scale)
            if change > tolerance * scale:
                leaks.append(Leak(document, other, "outputs", change / scale, *place))
        if not (parameters and others):
            continue
        # The other documents' part of the loss together first (summed in the same order on
        # both sides, so an isolated model's two sets of gradients are equal to the bit), and
        # each one alone only where they differ.
        before = _grads(_loss(baseline, weights, steps, others), parameters)
        after = _grads(_loss(outputs, weights, steps, others), parameters)
        if _max_abs([a - b for a, b in zip(after, before)]) <= tolerance * grad_scale:
            continue
        for other in others:
            mine = _grads(_loss(outputs, weights, steps, [other]), parameters)
            change = _max_abs([a - b for a, b in zip(mine, base_grad(other))])
            largest = max(largest, change / grad_scale)
            if change > tolerance * grad_scale:
                leaks.append(Leak(document, other, "gradients", change / grad_scale))
    return IsolationReport(leaks, len(probed), largest, tolerance, model.training)


def assert_isolated(model, batches, forward=None, **options):
    """check_isolation as a test assertion: raises AssertionError with the report when any
    document leaks; returns the report otherwise."""
    report = check_isolation(model, batches, forward, **options)
    if not report.ok:
        raise AssertionError(str(report))
    return report
