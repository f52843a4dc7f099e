"""Mixtures of sources: several lengths sets, each giving a set share of every epoch's steps,
packed together (docs/mixtures.md). The choice of each epoch's sequences is the core's
(src/plan/mixture.rs); this module only carries the sources to it.

    sampler = bload.BlockSampler(
        sources=[bload.Source("web.npy", 0.7, name="web"), bload.Source("code.npy", 0.3)],
        t_max=2048, blocks_per_batch=8)

Sequences are numbered as if the sources were concatenated in order: a dataset that
concatenates them the same way (torch.utils.data.ConcatDataset) serves the plan as it is, and
`sampler.source_of(index)` maps a sequence back to its source and its index there.
"""

import dataclasses
import json
import math
import numbers
import os

import torch

from bload._arguments import shown, stored_cap

__all__ = ["Source"]


@dataclasses.dataclass(frozen=True)
class Source:
    """One source of a mixture: `lengths` in any form BlockSampler takes them (a lengths file's
    path, a 1-d integer tensor, a sequence of ints), `weight` its share of each epoch's steps
    relative to the other sources' weights (a number above 0), and `name`, how stats() and
    errors name it (its index when None)."""

    lengths: object
    weight: float = 1.0
    name: str | None = None


def _source(index, source):
    """`source` (a Source, or a (lengths, weight) or (lengths, weight, name) tuple) as a Source."""
    if isinstance(source, Source):
        return source
    if isinstance(source, tuple) and len(source) in (2, 3):
        return Source(*source)
    raise TypeError(
        f"sources[{index}] = {type(source).__name__}: expected a bload.Source(lengths, weight, "
        f"name=None) or a (lengths, weight) tuple"
    )


def mixture_planner(sources, lengths_tensor, **options):
    """The core's planner of `sources` (see Source), with the planner's `options` by name."""
    if isinstance(sources, (str, os.PathLike, torch.Tensor)) or not hasattr(sources, "__iter__"):
        raise TypeError(
            f"sources = {sources!r}: expected a list of bload.Source(lengths, weight, name=None)"
        )
    sources = [_source(index, source) for index, source in enumerate(sources)]
    lengths, weights, names = [], [], []
    for index, source in enumerate(sources):
        weight = source.weight
        if isinstance(weight, bool) or not isinstance(weight, numbers.Real):
            raise TypeError(f"sources[{index}].weight = {weight!r}: expected a number above 0")
        if source.name is not None and not isinstance(source.name, str):
            raise TypeError(f"sources[{index}].name = {source.name!r}: expected a string or None")
        lengths.append(lengths_tensor(source.lengths, f"sources[{index}].lengths"))
        try:
            weights.append(float(weight))
        except OverflowError:  # an int or Fraction past the largest float
            raise ValueError(
                f"sources[{index}].weight = {shown(weight)}: expected a finite number above 0 "
                "(only the weights' ratios matter: scale them down)"
            ) from None
        names.append(source.name or "")
    # Weights are shares of their sum, which must be a number too (1e308 twice is not; the core
    # names each weight that is not finite and above 0 itself).
    if all(math.isfinite(weight) and weight > 0 for weight in weights) and not math.isfinite(
        sum(weights)
    ):
        raise ValueError(
            f"sources' weights = {weights}: their sum is not finite: expected weights whose sum "
            "is a finite number (only their ratios matter: scale them down)"
        )
    return torch.classes.bload.Planner.of_sources(
        lengths,
        weights,
        names,
        options["t_max"],
        options["blocks_per_batch"],
        options["world_size"],
        options["seed"],
        options["policy"],
        options["split_oversized"],
        options["cost"],
        options["max_pieces"],
    )


def stored_planner(lengths, sources_json, options):
    """A mixture's planner from its pickled form: the concatenated lengths and the core's JSON of
    its sources (name, weight, sequences each)."""
    sources = json.loads(sources_json)
    sizes = [source["sequences"] for source in sources]
    if sum(sizes) != lengths.numel():
        raise ValueError(
            f"sources: {sum(sizes)} sequences: expected {lengths.numel()}, the lengths stored"
        )
    return torch.classes.bload.Planner.of_sources(
        list(torch.split(lengths, sizes)),
        [float(source["weight"]) for source in sources],
        [source["name"] for source in sources],
        options["t_max"],
        options["blocks_per_batch"],
        options["world_size"],
        options["seed"],
        options["policy"],
        options["oversize"] == "split",
        options.get("cost", "steps"),
        stored_cap(options),
    )


def source_stats(planner, epoch):
    """Each source's part of `epoch`, as dicts of the core's SourceStats fields."""
    fields = (
        "name",
        "weight_share",
        "source_sequences",
        "sequences",
        "steps",
        "share",
        "repeats",
        "left_out",
    )
    return [dict(zip(fields, row)) for row in planner.source_stats(epoch)]


def source_of(starts, names, index):
    """(source, index in it) of sequence `index` (an int: the source's name; a tensor of them:
    int64 tensors of source numbers and indices), from where each source starts."""
    starts = torch.tensor(starts, dtype=torch.long)
    sequences = int(starts[-1])
    if isinstance(index, torch.Tensor):
        dtype = index.dtype
        if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
            # Not read as ints: 5.7 would be sequence 5, True sequence 1.
            raise TypeError(
                f"index = a {str(dtype).removeprefix('torch.')} tensor: expected an int or an "
                "integer tensor"
            )
        index = index.long()
        if index.numel() and (int(index.min()) < 0 or int(index.max()) >= sequences):
            bad = int(index[(index < 0) | (index >= sequences)][0])
            if dtype == torch.uint64:  # read as int64, 2^63 and above became negative
                bad %= 2**64
            raise ValueError(f"index = {bad}: expected a sequence from 0 to {sequences - 1}")
        source = torch.searchsorted(starts, index, right=True) - 1
        return source, index - starts[source]
    if isinstance(index, bool) or not isinstance(index, numbers.Integral):
        raise TypeError(f"index = {index!r}: expected an int or an integer tensor")
    if not 0 <= index < sequences:
        raise ValueError(f"index = {index}: expected a sequence from 0 to {sequences - 1}")
    source = int(torch.searchsorted(starts, torch.tensor(index), right=True)) - 1
    name = names[source] if names else None
    return name, int(index - starts[source])
