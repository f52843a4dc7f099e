"""BlockSampler: one rank's batches of packed blocks, for a DataLoader's batch_sampler=, with
torch.utils.data.DistributedSampler's conventions (rank and world size from torch.distributed,
set_epoch, len, state_dict).

The plan itself is the core's (torch.classes.bload.Planner): from (lengths, options, seed, epoch)
every rank computes the same epoch, so ranks never exchange plans; they only check, with one
all-gather per epoch, that they agree on it.
"""

import collections.abc
import warnings

import torch
import torch.jit._pickle

from bload import _library, mixture
from bload._arguments import (
    BOUNDS,
    POLICIES,
    distributed,
    integer,
    lengths_tensor,
    piece_cap,
)
from bload._sampler_pickle import (
    check_pickled_attributes,
    check_state_values,
    damaged,
    pickled_attributes,
    pickled_planner,
    stored_planner,
)
from bload._shared_plan import plan_of as _plan_of
from bload._shared_plan import reader_planner as _reader_planner
from bload._shared_plan import resume_of as _resume_of
from bload._shared_plan import shared_plan as _shared_plan
from bload._state_0_1 import current_state_of
from bload.block_batch import BlockBatch, PlanHash
from bload.read_ahead import READ_AHEAD, TableWindow, check_read_ahead

_library.load()

# A state the C++ sampler saved with torch::pickle_save tags its dict's types with
# torch.jit._pickle.restore_type_tag, which hands its argument back as it is. torch.load's
# default (weights_only=True) refuses every function it was not told of, so that state would
# need weights_only=False: bload tells it of this one, and torch.load reads the state as it is.
torch.serialization.add_safe_globals([torch.jit._pickle.restore_type_tag])

__all__ = ["BlockBatch", "BlockSampler", "PlanHash", "POLICIES"]


class BlockSampler(torch.utils.data.Sampler):
    """One rank's batches of an epoch, each a BlockBatch of `blocks_per_batch` blocks of `t_max`
    steps, for `DataLoader(bload.BlockDataset(...), batch_sampler=sampler, collate_fn=bload.collate)`.

    lengths: a lengths file's path, or the sequences' lengths (a 1-d integer tensor or list).
    sources: instead of lengths, a mixture (docs/mixtures.md): a list of bload.Source(lengths,
    weight, name=None) or (lengths, weight) pairs; each epoch holds each source's weight's share
    of all sources' steps, packed together, with sequences numbered as the sources concatenated
    (source_of maps one back); stats()["sources"] counts each source's steps, repeats, left out.
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
    max_pieces: the most pieces (sequences, or chunks of split ones) a block holds, for attention
    kernels and CUDA graphs that want a bounded cu_seqlens; None (the default) for no cap. Every
    packing policy keeps to it, and stats()' lower bound counts it; "lanes" refuses it.
    read_ahead: the batches after each one whose reads the loader starts before they are asked
    for (0: none), through the dataset's prefetch hook (docs/read_ahead.md).
    drop_last: only False: every rank already gets the same number of batches, by padding that
    stats() counts; bload never drops a sequence.
    shared_plan_dir: a directory of the job's own on each node (e.g. /dev/shm/JOB): the rank of
    local_rank 0 plans each epoch into a file there that every local rank maps, so a node holds
    one plan instead of one a rank (docs/shared_plans.md); the others wait for it up to
    shared_plan_timeout seconds, and do not read `lengths` at all: theirs are the file's (the
    agreement check compares every rank's). local_rank: torchrun's LOCAL_RANK by default, else 0.

    Every rank gets len(sampler) batches; together they hold every step of every sequence once.

    The position in the epoch (what state_dict() saves) is the sampler's own count of the
    batches it has handed out in the current iteration; nothing of the DataLoader is read. Each
    iteration serves the epoch from its start, but the first after load_state_dict, which goes
    on from the state. Without workers (num_workers=0) a DataLoader asks for a batch only when
    the loop asks for one, so the position is the batches the loop has had. With workers, the
    DataLoader hands batches to its workers ahead of the loop (up to num_workers *
    prefetch_factor of them): the count runs ahead of the loop by the batches in flight, and a
    state saved from it would skip them on resume. To resume exactly with workers, either say
    what the loop has had, `state_dict(position=batches_trained)` (the epoch's batches, counting
    those before a resume), or let the loader report it: torchdata's StatefulDataLoader asks the
    sampler for its state as it hands each batch to a worker and keeps the state of the last
    batch the loop received, so `loader.state_dict()` resumes exactly (see
    bload.integrations.torchdata).
    """

    read_ahead = READ_AHEAD  # what a sampler pickled before the option was had

    def __init__(
        self,
        lengths=None,
        t_max=None,
        blocks_per_batch=1,
        *,
        sources=None,
        world_size=None,
        rank=None,
        seed=0,
        policy="best_fit",
        split=False,
        cost="steps",
        max_pieces=None,
        drop_last=False,
        read_ahead=READ_AHEAD,
        shared_plan_dir=None,
        local_rank=None,
        shared_plan_timeout=600.0,
    ):
        if drop_last is not False:
            raise ValueError(
                f"drop_last = {drop_last!r}: expected False: bload gives every rank the same number "
                f"of batches by padding (counted in stats()), and never drops a sequence"
            )
        self.world_size, self.rank = distributed(world_size, rank)
        self.t_max = integer("t_max", t_max, *BOUNDS["t_max"])
        self.blocks_per_batch = integer(
            "blocks_per_batch", blocks_per_batch, *BOUNDS["blocks_per_batch"]
        )
        self.seed = integer("seed", seed, *BOUNDS["seed"])
        self.read_ahead = check_read_ahead(read_ahead)
        if policy not in POLICIES:  # the core's names
            raise ValueError(f"policy = {policy!r}: expected one of {', '.join(POLICIES)}")
        if not isinstance(split, bool):
            raise TypeError(
                f"split = {split!r}: expected True (cut sequences longer than t_max) or False"
            )
        if not isinstance(cost, str):
            raise TypeError(f'cost = {cost!r}: expected a string, "steps" or "attention:A"')
        max_pieces = piece_cap(max_pieces)
        if (lengths is None) == (sources is None):
            raise TypeError(
                "lengths, sources: expected exactly one: the lengths of one set of sequences, or "
                "sources=[bload.Source(lengths, weight), ...] for a mixture"
            )
        self._shared = _shared_plan(shared_plan_dir, local_rank, shared_plan_timeout)
        if self._shared is not None and sources is not None:
            raise ValueError(
                f"shared_plan_dir = {shared_plan_dir!r}: expected None with sources= (a plan "
                "shared on a node is not yet available for a mixture of sources)"
            )
        options = dict(t_max=self.t_max, blocks_per_batch=self.blocks_per_batch)
        options.update(world_size=self.world_size, seed=self.seed, policy=policy)
        options.update(split_oversized=split, cost=cost, max_pieces=max_pieces)
        if self._shared is not None and self._shared[1] != 0:
            options = (self.t_max, self.blocks_per_batch, self.world_size, self.seed)
            self.planner = _reader_planner(self._shared, *options, policy, split, cost, max_pieces)
        elif sources is not None:
            self.planner = mixture.mixture_planner(sources, lengths_tensor, **options)
        else:
            self.planner = torch.classes.bload.Planner(lengths_tensor(lengths), **options)
        self._start(0)

    def source_of(self, index):
        """The source of sequence `index` (as a batch's indices name it) and its index in that
        source: (name, index) for an int; for an integer tensor, int64 tensors of the sources'
        numbers (their order in `sources`) and the indices. One source, unnamed, without sources."""
        return mixture.source_of(self.planner.source_starts(), self.planner.source_names(), index)

    def _plan(self, epoch):
        # Pickles from before the option have no _shared.
        return _plan_of(self.planner, getattr(self, "_shared", None), epoch)

    def private_bytes(self):
        """Bytes this rank's planner and plan hold of their own (a mapped shared plan's columns
        are not theirs): an allocation count that does not depend on the resident set."""
        return self.planner.private_bytes() + self.plan.private_bytes()

    # The epoch: the plan being served, `position` batches of it handed out so far. `_resumed`:
    # set by load_state_dict until the next iteration, which then goes on from the position
    # loaded; any other iteration serves the epoch from its start.
    def _start(self, epoch):
        self.epoch, self.plan, self.position, self._resumed = (
            epoch,
            self._plan(epoch),
            0,
            False,
        )

    def _served(self):
        return self.position == self.plan.batches_per_rank()

    def _epoch_pending(self):
        """Whether the next iteration serves the epoch as it is set (from its start, part-way
        into it after a break, or a loaded state's rest) rather than one already served whole:
        what an adapter whose framework counts epochs of its own (accelerate) defers to."""
        return self._resumed or not self._served()

    def set_epoch(self, epoch):
        """Serves `epoch` next: from its start, or, for the epoch a state was loaded part-way into
        (load_state_dict), from where the state stands. Call it before each epoch, as with
        DistributedSampler: the order changes with the epoch. The epoch being served, set
        again, is left as it is: an iteration under way (a framework may start its loader's
        iterator first) goes on, and the next one starts it over."""
        epoch = integer("epoch", epoch, *BOUNDS["epoch"])
        if epoch != self.epoch or self._served():
            self._start(epoch)

    def __len__(self):
        """This rank's batches of the epoch, all of them, equal on every rank: as
        DistributedSampler's and torchdata's samplers, not the rest of an epoch a state was
        loaded part-way into. A DataLoader's len() is this, and the frameworks that resume
        mid-epoch count the batches already trained themselves (Lightning takes len() once, as
        the loader's first iteration starts, for every epoch: a resumed epoch's rest would cut
        every later epoch short). A resumed iteration serves the rest: on the world size the
        state was saved on, len(sampler) - state["position"] batches."""
        return self.plan.batches_per_rank()

    def __iter__(self):
        """The epoch's batches from its start, or, the first time after load_state_dict, from the
        state's position on. An iteration left part-way (a loop's break, or a loader that
        fetched ahead and was dropped) is not gone on from: the next serves the epoch whole;
        load_state_dict(state_dict(position=...)) goes on from a place."""
        return self._batches()

    def _batches(self):
        # Decided at the first batch asked for, not at iter(): a DataLoader with workers calls
        # iter() on its batch sampler twice and iterates the second.
        if not self._resumed and self.position:
            self._start(self.epoch)
        self._resumed = False
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            self.check_agreement()
        window = TableWindow()
        while self.position < self.plan.batches_per_rank():
            table, *ahead = window.tables(self.plan, self.rank, self.position, self.read_ahead)
            batch = BlockBatch(
                table,
                self.blocks_per_batch,
                self.t_max,
                self.epoch,
                self.position,
                carry=self.plan.carries_state(),
                first_lane=self.rank * self.blocks_per_batch,
                sequences=self.planner.num_sequences(),
                read_ahead=self.read_ahead,
                ahead=tuple(ahead),
                global_batch=tuple(self.plan.global_batch(self.position)),
            )
            # Counted before it is handed out: a state taken as the DataLoader receives it (as
            # StatefulDataLoader takes one) is the state after this batch.
            self.position += 1
            yield batch

    def check_agreement(self):
        """Every rank checks that all plan this same epoch (the lengths, every option, the epoch,
        the plan's hash) and that no two serve one rank: one all-gather, then a RuntimeError on
        every rank naming what differs, e.g. "ranks disagree on seed: rank 0 has 0, rank 1 has
        1". __iter__ calls it when torch.distributed is initialized."""
        gathered = [None] * torch.distributed.get_world_size()
        mine = self.planner.agreement(self.epoch, self.rank).tolist()
        torch.distributed.all_gather_object(gathered, mine)
        self.planner.check_agreement(self.epoch, torch.tensor(gathered))

    def stats(self):
        """What this epoch's plan costs, as a dict of counts: sequences, steps, pieces, blocks,
        padding (steps), deleted, split_sequences, split_pieces, rounding_blocks,
        rounding_padding, empty_blocks, lower_bound_blocks, lower_bound_padding; and
        rank_cost_imbalance, {"mean": ..., "worst": ...}: per global batch, the costliest rank's
        cost over the mean rank's in the sampler's cost, over the global batches; for a mixture,
        sources: a dict per source (docs/mixtures.md)."""
        mean, worst = self.plan.rank_cost_imbalance()
        stats = {**self.plan.stats(), "rank_cost_imbalance": {"mean": mean, "worst": worst}}
        if self.planner.source_names():  # a mixture: what each source gives this epoch
            stats["sources"] = mixture.source_stats(self.planner, self.epoch)
        return stats

    def plan_hash(self) -> PlanHash:
        """This epoch's plan's fingerprint, equal on ranks that planned alike, as the CLI prints."""
        return PlanHash(self.plan.plan_hash() & (2**64 - 1))

    def state_dict(self, position=None):
        """Where the loop stands, in bload's one checkpoint format (the C++ sampler's too): a dict
        of ints, bools and strings with the format's version, what the plan depends on (the
        lengths' count and fingerprint, every option), the epoch, the position (batches the loop
        has had) and where the epoch's blocks come from (planned_world_size, first_block: another
        world size's plan when the epoch was resumed from one), and a checksum of them all.
        torch.save(weights_only=True) and torch.load take it as it is, and so does C++'s
        bload::BlockSampler::load_state_dict.

        position: the batches of this epoch the loop has had, where the loader fetches ahead of
        it (a DataLoader with workers, see the class's doc); by default the batches handed out.
        It cannot pass them: from 0 to the batches handed out."""
        if position is None:
            position = self.position
        else:
            position = integer("position", position, 0, self.position)
        return dict(self.planner.sampler_state(self.plan.position(position), self.epoch + 1))

    def load_state_dict(self, state):
        """Goes on from `state`, saved by state_dict() (or the C++ sampler) with the same lengths
        and options and any world size: the next iteration serves the batches after its position;
        on another world size, the blocks not yet served, dealt to these ranks. A state saved
        after the last batch of its epoch leaves nothing of it to serve: the next iteration is
        empty (set_epoch starts an epoch, that one again too), unless set_epoch has already chosen
        a later epoch, not yet begun, which the state leaves as it is (a StatefulDataLoader loads
        its state as its next iteration starts, after the loop's set_epoch). The next iteration
        after a load goes on from the state; later ones serve their epoch whole. A lanes sampler
        goes on with the same lanes, so it needs the lane count saved (world_size *
        blocks_per_batch), in any factors; other policies need the saved blocks_per_batch.

        A state saved for other lengths or options, damaged (its checksum does not match) or of
        another version is refused with a RuntimeError naming each field; a state of bload 0.1
        (the position alone) loads with a warning that none of that could be checked. Either way
        a refused state leaves the sampler as it was."""
        if not isinstance(state, collections.abc.Mapping):
            raise TypeError(
                f"state: expected the dict state_dict() returns, got {type(state).__name__}"
            )
        check_state_values(state)
        if "version" not in state:
            return self._load_unchecked(state)
        plan, served, next_epoch = _resume_of(
            self.planner, getattr(self, "_shared", None), dict(state)
        )
        if plan is None:  # saved (by C++) before its first epoch: that epoch from its start
            self._start(next_epoch)
            return
        self._resume(plan, served)

    def _resume(self, plan, served):
        # A state with nothing left of its epoch, loaded once set_epoch has chosen a later epoch
        # that has not begun, leaves that epoch: StatefulDataLoader loads the state it was given
        # as its next iteration starts, after the loop's set_epoch(epoch + 1), and the state's
        # epoch, served, would take the place of the one set (an empty iteration, and an epoch
        # lost). Any other state is gone on from.
        if (
            served == plan.batches_per_rank()
            and plan.epoch() < self.epoch
            and self.position == 0
            and not self._resumed
        ):
            return
        self.epoch, self.plan, self.position, self._resumed = plan.epoch(), plan, served, True

    def _load_unchecked(self, state):
        """A state of bload 0.1: the position alone, made the core's state of this sampler at
        that position (_state_0_1.py), which the core checks against the plan as any state."""
        saved = current_state_of(state, self.planner, self.blocks_per_batch)
        plan, served, _ = self.planner.resume_state(saved)  # on each rank, not shared
        warnings.warn(
            "BlockSampler.load_state_dict: the state has no 'version' (saved by bload 0.1, the position "
            "alone): the lengths and options it was saved for and its checksum cannot be checked; save "
            "it again with this bload to have them checked",
            stacklevel=3,
        )
        self._resume(plan, served)

    # Pickled as plain values, never torch's ScriptObject (_sampler_pickle.py says why).
    def __getstate__(self):
        return pickled_attributes(self)

    def __setstate__(self, state):
        # A pickle is data from outside: what it holds is checked, and each error names the
        # part of it that is wrong, not the line of this method it broke.
        if not isinstance(state, dict):
            raise ValueError(damaged("state", state, "a dict of the sampler's attributes"))
        state = dict(state)
        saved, stored = state.pop("_state", None), state.pop("_planner", None)
        if not isinstance(saved, collections.abc.Mapping):
            raise ValueError(damaged("_state", saved, "the dict state_dict() returns"))
        lengths, options, sources = stored_planner(stored)
        check_pickled_attributes(state, options)
        # Made whole on a copy, so that a pickle refused at any step leaves this one as it was.
        copy = object.__new__(type(self))
        copy.__dict__.update(state)
        copy.read_ahead = check_read_ahead(state.get("read_ahead", READ_AHEAD))
        copy.planner = pickled_planner(lengths, options, sources, stored)
        copy._start(0)
        # Sets the plan and the place in it, checked against the planner: the copy's next
        # iteration goes on from there, as after any load_state_dict.
        copy.load_state_dict(saved)
        self.__dict__ = copy.__dict__
