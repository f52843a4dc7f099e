"""bload with torchdata's StatefulDataLoader: a loader whose state_dict() resumes mid-epoch
exactly, workers on.

A plain DataLoader with workers asks the sampler for batches ahead of the loop, so the
sampler's own state runs ahead of what the loop has trained (see bload.BlockSampler).
StatefulDataLoader asks the sampler for its state as it hands each batch to a worker, and its
state_dict() keeps the one of the last batch the loop received (with the workers' states): a
loader loaded from it serves the batches after that one, wherever the workers had got to.

    sampler = bload.BlockSampler(lengths, t_max, blocks_per_batch, seed=seed)
    loader = bload.integrations.torchdata.stateful_loader(dataset, sampler, num_workers=2)
    for epoch in range(first_epoch, epochs):
        sampler.set_epoch(epoch)
        for batch in loader:
            ...
            checkpoint = {"loader": loader.state_dict(), ...}   # the sampler's state is in it

    # resuming: a loader made the same way, then
    loader.load_state_dict(checkpoint["loader"])   # the next iteration goes on after the saved batch
"""

from torchdata.stateful_dataloader import StatefulDataLoader

from bload.dataset import BlockDataset, collate
from bload.sampler import BlockSampler

__all__ = ["stateful_loader"]

# What bload sets itself, or what would break the batches' order the state relies on.
_REFUSED = {
    "batch_size": "bload's sampler makes the batches",
    "shuffle": "the plan orders the batches (seed, set_epoch)",
    "sampler": "bload's sampler is the batch sampler",
    "batch_sampler": "it is the sampler passed",
    "drop_last": "bload never drops a sequence",
    "collate_fn": "bload's batches are packed already (bload.collate)",
}


def stateful_loader(dataset, sampler, **options):
    """A StatefulDataLoader serving `sampler`'s batches of `dataset` (a bload.BlockDataset, or a
    map-style dataset of (data, target) pairs that is wrapped in one with the sampler's t_max).
    `options` are StatefulDataLoader's (num_workers, pin_memory, persistent_workers,
    prefetch_factor, snapshot_every_n_steps, ...), except those bload sets, and in_order, which
    must stay True: the state is the last batch in order."""
    if not isinstance(sampler, BlockSampler):
        raise TypeError(f"sampler: expected a bload.BlockSampler, got {type(sampler).__name__}")
    for name, why in _REFUSED.items():
        if name in options:
            raise TypeError(
                f"stateful_loader: {name} = {options[name]!r}: expected it unset: {why}"
            )
    if options.get("in_order", True) is not True:
        raise ValueError(
            f"in_order = {options['in_order']!r}: expected True: the loader's state is the last batch the loop "
            "received in the plan's order, and lanes carry state from batch to batch"
        )
    if not isinstance(dataset, BlockDataset):
        dataset = BlockDataset(dataset, sampler.t_max)
    return StatefulDataLoader(dataset, batch_sampler=sampler, collate_fn=collate, **options)
