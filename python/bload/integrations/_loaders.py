"""What the integrations check on a DataLoader: that bload's sampler is its batch sampler, and
that no framework has wrapped it to shard its batches again."""

from bload.sampler import BlockSampler


def block_sampler_of(loader, where):
    """The BlockSampler that `loader` draws its batches from, or a TypeError saying what `where`
    expected. A batch sampler that wraps a BlockSampler (as accelerate's BatchSamplerShard does)
    is refused: it deals bload's batches, already one rank's, among the ranks again."""
    batch_sampler = getattr(loader, "batch_sampler", None)
    if isinstance(batch_sampler, BlockSampler):
        return batch_sampler
    inner = getattr(batch_sampler, "batch_sampler", None)
    if isinstance(inner, BlockSampler):
        raise ValueError(
            f"{where}: the loader's batches come from {type(batch_sampler).__name__} over a bload.BlockSampler "
            f"of world_size {inner.world_size}: it shards this rank's batches a second time (each rank would get "
            "a part of its own share, and the ranks no longer the same count). Pass the DataLoader built with "
            "batch_sampler=bload.BlockSampler(...) itself, not one a framework has prepared"
        )
    raise TypeError(
        f"{where}: expected a DataLoader with batch_sampler=bload.BlockSampler(...), got one whose batch "
        f"sampler is {type(batch_sampler).__name__}"
    )
