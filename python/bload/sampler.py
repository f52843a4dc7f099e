"""BlockSampler: one rank's batches of packed blocks, for a DataLoader's batch_sampler=, with
torch.utils.data.DistributedSampler's conventions (rank and world size from torch.distributed,
set_epoch, len, state_dict).

The plan itself is the core's (torch.classes.bload.Planner): from (lengths, options, seed, epoch)
every rank computes the same epoch, so ranks never exchange plans; they only check, with one
all-gather per epoch, that they agree on it.
"""

import collections.abc
import dataclasses
import json
import numbers
import os
import sys
import warnings
import weakref

import torch

from bload import _library

_library.load()

__all__ = ["BlockBatch", "BlockSampler", "PlanHash", "POLICIES"]

_INT64 = (-(2**63), 2**63 - 1)

#: The policies a plan can have, in the core's order.
POLICIES = tuple(torch.ops.bload.policy_names())

#: The values each int option may take, from the core's one list: name -> (lowest, highest).
BOUNDS = {name: (low, high) for name, low, high in zip(*torch.ops.bload.option_bounds())}


def integer(name, value, minimum=_INT64[0], maximum=_INT64[1]):
    """`value` as an int from `minimum` to `maximum`, or a TypeError/ValueError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} = {value!r}: expected an int")
    if not minimum <= value <= maximum:
        raise ValueError(f"{name} = {value}: expected an int from {minimum} to {maximum}")
    return int(value)


class PlanHash(int):
    """A plan's fingerprint: an unsigned 64-bit int, shown as the CLI shows it (0x + 16 digits)."""

    def __repr__(self):
        return f"{int(self):#018x}"

    __str__ = __repr__


@dataclasses.dataclass(frozen=True)
class BlockBatch:
    """What BlockSampler hands the DataLoader for one batch: batch `index` of `epoch` for one
    rank, as its block table (int64 [pieces, 6], see bload.ops) of `blocks` blocks of `t_max`
    steps. bload.BlockDataset turns it into a PackedBatch."""

    table: torch.Tensor
    blocks: int
    t_max: int
    epoch: int
    index: int
    #: Each row carries its recurrent state from the previous batch (policy "lanes").
    carry: bool = False
    #: The lane of row 0, rank * blocks: row j is lane first_lane + j.
    first_lane: int = 0
    #: Sequences in the lengths planned (0: not known): BlockDataset refuses a dataset of
    #: another size, naming both, before reading out of its range.
    sequences: int = 0

    def __iter__(self):  # a DataLoader iterates a batch only for a dataset without __getitems__
        raise TypeError(
            "a bload batch reached a dataset that cannot load it: wrap the dataset in "
            "bload.BlockDataset (and pass BlockSampler as batch_sampler=, not sampler=)"
        )


def _lengths_tensor(lengths):
    if isinstance(lengths, (str, os.PathLike)):
        # Any lengths file: the core's formats, and Arrow or Parquet's only list column.
        from bload.lengths import read_lengths

        return read_lengths(lengths)
    if isinstance(lengths, torch.Tensor):
        return lengths
    expected = "expected a lengths file's path, a 1-d integer tensor or a sequence of ints"
    try:
        # A numpy array's memory as it is (int32 and int64 are read in place); an empty list
        # becomes int64 rather than float.
        tensor = torch.as_tensor(lengths)
    except (TypeError, ValueError, RuntimeError, OverflowError) as err:
        raise TypeError(f"lengths: {expected} ({err})") from None
    if tensor.numel() == 0:
        return tensor.long()
    if tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool:
        # Say what the caller passed, not the tensor it became.
        dtype = getattr(lengths, "dtype", None)
        got = f"a {type(lengths).__name__} of {dtype}" if dtype is not None else (
            f"a {type(lengths).__name__} of {type(next(iter(lengths))).__name__}s")  # fmt: skip
        raise TypeError(f"lengths: {expected}, got {got}")
    return tensor


def _distributed(world_size, rank):
    """world_size and rank, each torch.distributed's where it is initialized and not given."""
    initialized = torch.distributed.is_available() and torch.distributed.is_initialized()
    if world_size is None:
        world_size = torch.distributed.get_world_size() if initialized else 1
    world_size = integer("world_size", world_size, *BOUNDS["world_size"])
    if rank is None:
        rank = torch.distributed.get_rank() if initialized else 0
    return world_size, integer("rank", rank, 0, world_size - 1)


class _LoaderWatch:
    """How many batches the DataLoader iterator pulling a sampler's batches has yielded to the
    loop, read while it lives and kept when it dies. Only weak references to the iterator are
    held (a loop left with `break` must end its workers at once, not at a garbage collection);
    its attributes dict is kept until it dies, so the last count can still be read then."""

    def __init__(self, loader):
        self.yielded = 0
        self._loader = weakref.ref(loader, self._ended)
        self._attributes = vars(loader)

    def _ended(self, _):
        self.yielded = self._attributes.get("_num_yielded", self.yielded)
        self._attributes = None

    def count(self, iterator):
        """The batches yielded, where the loader pulls from `iterator` (or pulled, once dead)."""
        loader = self._loader()
        if loader is None:
            return self.yielded
        if getattr(loader, "_sampler_iter", None) is not iterator:
            return None
        return loader._num_yielded


def _pulling_loader():
    """A watch on the DataLoader iterator whose next() is running this generator's first step, if
    any: the frame that calls next() on a batch sampler's iterator is the loader iterator's
    _next_index."""
    frame = sys._getframe(2)  # 0: this function, 1: the generator, 2: who called next()
    candidate = frame.f_locals.get("self") if frame is not None else None
    del frame
    if isinstance(candidate, torch.utils.data.dataloader._BaseDataLoaderIter):
        return _LoaderWatch(candidate)
    return None


class BlockSampler(torch.utils.data.Sampler):
    """One rank's batches of an epoch, each a BlockBatch of `blocks_per_batch` blocks of `t_max`
    steps, for `DataLoader(bload.BlockDataset(...), batch_sampler=sampler, collate_fn=bload.collate)`.

    lengths: a lengths file's path, or the sequences' lengths (a 1-d integer tensor or list).
    world_size, rank: torch.distributed's when it is initialized, else 1 and 0.
    seed: with the epoch, decides the plan; every rank must pass the same.
    policy: "best_fit" (near the fewest blocks), "random_fill", "pad_to_max" (one sequence a
    block, the usual padding, for comparison), or "lanes": row j of every batch of rank r is lane
    r * blocks_per_batch + j for the whole epoch, which runs its sequences (of any length) end to
    end, t_max steps a batch; a model carries each row's state from batch to batch where the
    batch's `carry` says so. Batches must then be served in order (DataLoader's default).
    split: cut sequences longer than t_max into pieces (counted in stats()) instead of refusing.
    cost: how blocks are dealt to ranks: "steps" (the default, in their shuffled order) or
    "attention:A", a piece of L steps costing A*L + L^2: blocks of like cost share a global batch,
    dealt so that its costliest rank costs least (docs/cost_balance.md). Not with "lanes". The
    core checks it (a RuntimeError naming cost, the value and what is expected).
    drop_last: only False: every rank already gets the same number of batches, by padding that
    stats() counts; bload never drops a sequence.

    Every rank gets len(sampler) batches; together they hold every step of every sequence once.
    """

    def __init__(self, lengths, t_max, blocks_per_batch=1, *, world_size=None, rank=None, seed=0,
                 policy="best_fit", split=False, cost="steps", drop_last=False):  # fmt: skip
        if drop_last is not False:
            raise ValueError(
                f"drop_last = {drop_last!r}: expected False: bload gives every rank the same number "
                f"of batches by padding (counted in stats()), and never drops a sequence"
            )
        self.world_size, self.rank = _distributed(world_size, rank)
        self.t_max = integer("t_max", t_max, *BOUNDS["t_max"])
        self.blocks_per_batch = integer("blocks_per_batch", blocks_per_batch, *BOUNDS["blocks_per_batch"])
        self.seed = integer("seed", seed, *BOUNDS["seed"])
        if policy not in POLICIES:  # the core's names
            raise ValueError(f"policy = {policy!r}: expected one of {', '.join(POLICIES)}")
        if not isinstance(split, bool):
            raise TypeError(f"split = {split!r}: expected True (cut sequences longer than t_max) or False")
        if not isinstance(cost, str):
            raise TypeError(f'cost = {cost!r}: expected a string, "steps" or "attention:A"')
        self.planner = torch.classes.bload.Planner(
            _lengths_tensor(lengths), self.t_max, blocks_per_batch=self.blocks_per_batch,
            world_size=self.world_size, seed=self.seed, policy=policy, split_oversized=split, cost=cost,
        )  # fmt: skip
        self._start(0)

    # The epoch: the plan being served, `position` batches of it handed to the DataLoader so far.
    def _start(self, epoch):
        self.epoch, self.plan, self.position = epoch, self.planner.plan(epoch), 0
        self._loader, self._iterator, self._loader_from = None, None, 0

    def _consumed(self):
        """Batches of the epoch the loop has had: where a DataLoader pulls the batches, those it
        has yielded (its workers fetch some ahead), else those handed out."""
        iterator = self._iterator() if self._iterator is not None else None
        yielded = self._loader.count(iterator) if self._loader is not None else None
        if yielded is not None:
            return self._loader_from + yielded
        return self.position

    def _served(self):
        return self._consumed() == self.plan.batches_per_rank()

    def set_epoch(self, epoch):
        """Serves `epoch` next: from its start, or, for the epoch being served part-way (as after
        load_state_dict), from where it is. Call it before each epoch, as with
        DistributedSampler: the order changes with the epoch."""
        epoch = integer("epoch", epoch, *BOUNDS["epoch"])
        if epoch != self.epoch or self._served():
            self._start(epoch)

    def __len__(self):
        """This rank's batches in the next iteration: the rest of the epoch, or all of it once
        served. Equal on every rank."""
        if self._served():
            return self.plan.batches_per_rank()
        return self.plan.batches_per_rank() - self._consumed()

    def __iter__(self):
        if self._served():  # an epoch served to its end is served again, from its start
            self._start(self.epoch)
        else:  # a loop left part-way goes on after what it had, not after what was prefetched
            self.position = self._consumed()
        iterator = self._batches()
        # Weak references only: a loader left with `break` and dropped must end its workers at
        # once, not wait for a garbage collection to break a cycle through this sampler.
        self._iterator = weakref.ref(iterator)
        return iterator

    def _batches(self):
        self._loader = _pulling_loader()
        self._loader_from = self.position
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            self.check_agreement()
        while self.position < self.plan.batches_per_rank():
            table = self.plan.batch(self.rank, self.position)
            batch = BlockBatch(table, self.blocks_per_batch, self.t_max, self.epoch, self.position,
                               carry=self.plan.carries_state(), first_lane=self.rank * self.blocks_per_batch,
                               sequences=self.planner.num_sequences())
            self.position += 1
            yield batch

    def check_agreement(self):
        """Every rank checks that all plan this same epoch (the lengths, every option, the epoch,
        the plan's hash): one all-gather, then a RuntimeError on every rank naming what differs,
        e.g. "ranks disagree on seed: rank 0 has 0, rank 1 has 1". __iter__ calls it when
        torch.distributed is initialized."""
        gathered = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(gathered, self.planner.agreement(self.epoch).tolist())
        self.planner.check_agreement(self.epoch, torch.tensor(gathered))

    def stats(self):
        """What this epoch's plan costs, as a dict of counts: sequences, steps, pieces, blocks,
        padding (steps), deleted, split_sequences, split_pieces, rounding_blocks,
        rounding_padding, empty_blocks, lower_bound_blocks, lower_bound_padding; and
        rank_cost_imbalance, {"mean": ..., "worst": ...}: per global batch, the costliest rank's
        cost over the mean rank's in the sampler's cost, over the global batches."""
        mean, worst = self.plan.rank_cost_imbalance()
        return {**self.plan.stats(), "rank_cost_imbalance": {"mean": mean, "worst": worst}}

    def plan_hash(self) -> PlanHash:
        """This epoch's plan's fingerprint, equal on ranks that planned alike, as the CLI prints."""
        return PlanHash(self.plan.plan_hash() & (2**64 - 1))

    def state_dict(self):
        """Where the loop stands, in bload's one checkpoint format (the C++ sampler's too): a dict
        of ints, bools and strings with the format's version, what the plan depends on (the
        lengths' count and fingerprint, every option), the epoch, the position (batches the loop
        has had) and where the epoch's blocks come from (planned_world_size, first_block: another
        world size's plan when the epoch was resumed from one), and a checksum of them all.
        torch.save(weights_only=True) and torch.load take it as it is, and so does C++'s
        bload::BlockSampler::load_state_dict."""
        position = self.plan.position(self._consumed())
        return dict(self.planner.sampler_state(position, self.epoch + 1))

    def load_state_dict(self, state):
        """Goes on from `state`, saved by state_dict() (or the C++ sampler) with the same lengths
        and options and any world size: the next iteration serves the batches after its position;
        on another world size, the blocks not yet served, dealt to these ranks. A lanes sampler
        goes on with the same lanes, so it needs the lane count saved (world_size *
        blocks_per_batch), in any factors; other policies need the saved blocks_per_batch.

        A state saved for other lengths or options, damaged (its checksum does not match) or of
        another version is refused with a RuntimeError naming each field; a state of bload 0.1
        (the position alone) loads with a warning that none of that could be checked. Either way
        a refused state leaves the sampler as it was."""
        if not isinstance(state, collections.abc.Mapping):
            raise TypeError(f"state: expected the dict state_dict() returns, got {type(state).__name__}")
        if "version" not in state:
            return self._load_unchecked(state)
        plan, served, next_epoch = self.planner.resume_state(dict(state))
        if plan is None:  # saved (by C++) before its first epoch: that epoch from its start
            self._start(next_epoch)
            return
        self.epoch, self.plan, self.position = plan.epoch(), plan, served
        self._loader, self._iterator, self._loader_from = None, None, 0

    def _load_unchecked(self, state):
        """A state of bload 0.1: the position alone."""
        missing = [name for name in ("epoch", "position", "world_size") if name not in state]
        if missing:
            raise ValueError(f"state: no {', '.join(missing)}: expected the dict state_dict() returns")
        warnings.warn(
            "BlockSampler.load_state_dict: the state has no 'version' (saved by bload 0.1, the position "
            "alone): the lengths and options it was saved for and its checksum cannot be checked; save "
            "it again with this bload to have them checked",
            stacklevel=3,
        )
        value = {name: integer(f"state[{name!r}]", state[name]) for name in state}
        position = {
            "epoch": value["epoch"],
            "batches": value["position"],
            "world_size": value["world_size"],
            # A state saved before blocks_per_batch was part of it is taken to have this one.
            "blocks_per_batch": value.get("blocks_per_batch", self.blocks_per_batch),
            "planned_world_size": value.get("planned_world_size", value["world_size"]),
            "first_block": value.get("first_block", 0),
        }
        plan, served = self.planner.resume(position)
        self.epoch, self.plan, self.position = value["epoch"], plan, served
        self._loader, self._iterator, self._loader_from = None, None, 0

    # Pickled as plain values: the planner's lengths (their bytes) and options (the core's JSON),
    # and the sampler's state (identity and checksum included). Never as torch's ScriptObject:
    # torch's unpickler trusts a ScriptObject's saved state, and a damaged pickle of one can crash
    # the process, where a damaged plain value is refused by the planner's or the state's checks.
    def __getstate__(self):
        (lengths, options), _ = self.planner.__getstate__()
        skipped = ("planner", "plan", "_loader", "_iterator")
        state = {name: value for name, value in self.__dict__.items() if name not in skipped}
        state["_planner"] = (str(lengths.dtype).removeprefix("torch."), lengths.numpy().tobytes(), options)
        state["_state"] = self.state_dict()
        return state

    def __setstate__(self, state):
        saved = state.pop("_state")
        dtype, data, options = state.pop("_planner")
        lengths = torch.frombuffer(bytearray(data), dtype={"int32": torch.int32, "int64": torch.int64}[dtype]) if data else torch.empty(0, dtype=torch.long)
        options = json.loads(options)
        self.__dict__.update(state)
        self.planner = torch.classes.bload.Planner(
            lengths, options["t_max"], blocks_per_batch=options["blocks_per_batch"], world_size=options["world_size"],
            seed=options["seed"], policy=options["policy"], split_oversized=options["oversize"] == "split",
            cost=options.get("cost", "steps"),  # pickles from before the option were dealt by steps
        )  # fmt: skip
        self._start(0)
        self.load_state_dict(saved)  # sets the plan and the place in it, checked against the planner
