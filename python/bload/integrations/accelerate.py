"""bload with Hugging Face accelerate: prepare_loader(accelerator, loader) in place of
accelerator.prepare(loader).

accelerate shards every map-style DataLoader it prepares: it wraps the batch sampler in
BatchSamplerShard, which deals the batches among the processes (accelerate#4199). A
bload.BlockSampler's batches are one rank's already, so that would shard them twice: each rank
would train on every world_size-th of its own batches. prepare_loader keeps bload's sharding
and takes the rest of accelerate's preparation (device placement, the loader accelerate saves
and loads with its state):

    accelerator = Accelerator()
    sampler = bload.BlockSampler(lengths, t_max, blocks_per_batch, seed=seed)  # ranks from torch.distributed
    loader = DataLoader(bload.BlockDataset(dataset, t_max), batch_sampler=sampler,
                        collate_fn=bload.collate, num_workers=2)
    loader = bload.integrations.accelerate.prepare_loader(accelerator, loader)
    model, optimizer = accelerator.prepare(model, optimizer)

The loader it returns is marked prepared, so accelerator.prepare(loader) later hands it back
unchanged. A loader accelerator.prepare has sharded already is refused, saying what to do.

The epoch served is the sampler's: sampler.set_epoch(epoch), a state loaded into the sampler or
the loader (accelerator.load_state with a stateful loader), or loader.set_epoch(epoch) (what the
HF Trainer calls). accelerate's own loader sets its sampler's epoch to a count of the iterations
it has run to their end, each time an iteration starts; that count starts at 0 in every process
and does not move on a break, so after a resume it would serve another epoch than the one set.
The loader prepare_loader returns counts after the sampler instead: an iteration serves the
epoch the sampler has set (or the rest of it), and, once that epoch has been served whole
without another being set, the one after it, as accelerate's count would.
"""

import accelerate
from accelerate.data_loader import DataLoaderShard, prepare_data_loader

from bload.integrations._loaders import block_sampler_of

__all__ = ["prepare_loader"]


def prepare_loader(accelerator, loader, *, device_placement=None):
    """`loader` (a DataLoader with batch_sampler=bload.BlockSampler) prepared by `accelerator`
    without accelerate's sharding: batches placed on accelerator.device (unless
    device_placement=False, or the accelerator's device_placement is off), the loader
    registered with the accelerator. The sampler must plan for the accelerator's processes: its
    world_size and rank are accelerator.num_processes and accelerator.process_index."""
    if not isinstance(accelerator, accelerate.Accelerator):
        raise TypeError(
            f"accelerator: expected an accelerate.Accelerator, got {type(accelerator).__name__}"
        )
    sampler = block_sampler_of(loader, "prepare_loader(accelerator, loader)")
    if (sampler.world_size, sampler.rank) != (accelerator.num_processes, accelerator.process_index):
        raise ValueError(
            f"the loader's BlockSampler plans for world_size {sampler.world_size}, rank {sampler.rank}: expected "
            f"the accelerator's processes, num_processes {accelerator.num_processes} and process_index "
            f"{accelerator.process_index} (make the sampler after Accelerator(), which starts torch.distributed)"
        )
    config = accelerator.dataloader_config
    if config.dispatch_batches:
        raise ValueError(
            "DataLoaderConfiguration(dispatch_batches=True): process 0 would load every rank's batches and slice "
            "them, but a bload batch is one rank's whole, packed: expected dispatch_batches=False or None"
        )
    if config.split_batches:
        raise ValueError(
            "DataLoaderConfiguration(split_batches=True): each process would take a slice of every batch, but a "
            "bload batch is one rank's already: expected split_batches=False"
        )
    if device_placement is None:
        device_placement = accelerator.device_placement
    # One process as far as accelerate's sharding goes: the batch sampler stays bload's.
    prepared = prepare_data_loader(
        loader,
        accelerator.device,
        num_processes=1,
        process_index=0,
        put_on_device=device_placement,
        rng_types=None,
        non_blocking=accelerator.non_blocking,
        use_stateful_dataloader=config.use_stateful_dataloader,
    )
    if type(prepared) is DataLoaderShard:
        prepared = _SamplerEpochShard.of(prepared, sampler)
    # accelerate's own mark of a prepared loader: accelerator.prepare() returns it as it is.
    prepared._is_accelerate_prepared = True
    return accelerator.prepare_data_loader(prepared)


class _SamplerEpochShard(DataLoaderShard):
    """accelerate's DataLoaderShard whose count of epochs (`iteration`) follows its BlockSampler.

    DataLoaderShard.__iter__ starts with self.set_epoch(self.iteration), which sets the
    sampler's epoch to accelerate's count: 0 in a new process, moved on only by an iteration run
    to its end. Here the count is taken from the sampler as each iteration starts: the epoch it
    has set and not yet served whole (set_epoch, a state loaded, part-way after a break), or,
    after that epoch was served whole, the next. That one call of __iter__ leaves an epoch the
    sampler has set as it is (it may be the rest of a loaded state); every other set_epoch on the
    loader (the HF Trainer's, a user's) sets the sampler's epoch as accelerate's does."""

    _from_iteration = False  # the set_epoch __iter__ is about to make

    @classmethod
    def of(cls, shard, sampler):
        # The DataLoaderShard prepare_data_loader made, as it is (its loader, device, state),
        # with this class's two methods: DataLoaderShard has no hook for its class.
        made = cls.__new__(cls)
        made.__dict__.update(shard.__dict__)
        made._block_sampler = sampler
        return made

    def __iter__(self):
        sampler = self._block_sampler
        if sampler._epoch_pending():
            self.iteration, self._from_iteration = sampler.epoch, True
        else:  # served whole, no epoch set since: the next, as accelerate's own count goes on
            self.iteration, self._from_iteration = sampler.epoch + 1, False
        try:
            yield from super().__iter__()
        finally:
            self._from_iteration = False

    def set_epoch(self, epoch):
        if self._from_iteration:  # __iter__'s call, with the epoch the sampler has set
            self._from_iteration = False
            self.iteration = epoch
            return
        super().set_epoch(epoch)
