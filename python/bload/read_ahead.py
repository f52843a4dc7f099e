"""Read-ahead from the plan (docs/read_ahead.md): the loader knows every batch of the epoch
before it starts, so it starts the reads of the next `read_ahead` batches before they are asked
for. BlockSampler hands each batch out with the block tables of the batches after it
(BlockBatch.ahead); BlockDataset gives them to the dataset's hook before it reads the batch:

- `dataset.prefetch_table(table)`, where the dataset defines it, once per batch: bload's
  SequenceStore does, advising the kernel of exactly the byte ranges the batch reads (the core
  computes them: torch.ops.bload.store_read_ranges);
- else `dataset.prefetch(index, offset, length)`, once per piece of the batch, in plan order: a
  user's dataset starts fetching those steps (from network storage, say) and returns at once.

A hook never changes a batch: the batch is read with get_range or [] as without it.
"""

import numbers

import torch

from bload import _library, ops

_library.load()

__all__ = ["READ_AHEAD", "MAX_READ_AHEAD", "check_read_ahead", "TableWindow", "ReadAhead"]

#: The default (the batches whose reads start ahead of the one read; measured, not guessed:
#: BENCHMARKS.md, "Read-ahead from the plan") and the most: the core's, as C++'s Options has them.
READ_AHEAD, MAX_READ_AHEAD = torch.ops.bload.read_ahead_bounds()


def check_read_ahead(value):
    """`value` as the read_ahead option: an int from 0 (no read-ahead) to MAX_READ_AHEAD."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"read_ahead = {value!r}: expected an int, the batches to start reading ahead "
            f"(0 to {MAX_READ_AHEAD}; 0: none)"
        )
    if not 0 <= value <= MAX_READ_AHEAD:
        raise ValueError(
            f"read_ahead = {value}: expected an int from 0 (no read-ahead) to {MAX_READ_AHEAD}"
        )
    return int(value)


class TableWindow:
    """The block tables of the batch a sampler hands out and of the read_ahead batches after it,
    each asked of the plan once however many batches it rides ahead with."""

    def __init__(self):
        self._plan, self._tables = None, []  # the plan they are of, and (index, table)

    def tables(self, plan, rank, position, read_ahead):
        """The tables of batches position, ..., position + read_ahead of `rank` in `plan` (fewer
        at the epoch's end)."""
        if plan is not self._plan:  # another epoch, or a state loaded: nothing kept is of it
            self._plan, self._tables = plan, []
        last = min(position + read_ahead, plan.batches_per_rank() - 1)
        kept = [(index, table) for index, table in self._tables if position <= index <= last]
        start = kept[-1][0] + 1 if kept else position
        kept.extend((index, plan.batch(rank, index)) for index in range(start, last + 1))
        self._tables = kept
        return [table for _, table in kept]


class ReadAhead:
    """One reading process's read-ahead over a dataset: which batches it has started, so that
    each piece's hook runs once. In a DataLoader worker, only the batches that worker will read
    are started (the DataLoader deals batches to its W workers in turn: a worker given batch i
    gets i + W next), so a hook that fetches into the process's memory has fetched what that
    process reads; with W workers, read_ahead = k starts k // W batches of a worker's own."""

    def __init__(self, dataset):
        self.dataset = dataset
        # (epoch, index of the last batch read, index of the last batch started)
        self._state = None

    def _hook(self, name):
        hook = getattr(self.dataset, name, None)
        return hook if callable(hook) else None

    def __getstate__(self):  # a worker's copy starts with nothing started
        return {**self.__dict__, "_state": None}

    def start(self, batch):
        """Starts the reads of `batch` (if no earlier batch started them: an epoch's first, or
        one resumed) and of the batches after it (batch.ahead) that this process reads."""
        table_hook, piece_hook = self._hook("prefetch_table"), self._hook("prefetch")
        if (table_hook is None and piece_hook is None) or batch.read_ahead == 0:
            return
        info = torch.utils.data.get_worker_info()
        stride = info.num_workers if info is not None else 1
        state = self._state
        if state is None or state[0] != batch.epoch or batch.index <= state[1]:
            started = batch.index - 1  # a new epoch or iteration: nothing of it started
        else:
            started = state[2]
        for step, table in enumerate((batch.table, *batch.ahead)):
            index = batch.index + step
            if step % stride == 0 and index > started:
                self._start_table(table, table_hook, piece_hook)
                started = index
        self._state = (batch.epoch, batch.index, started)

    def _start_table(self, table, table_hook, piece_hook):
        if table_hook is not None:
            self._call(table_hook, (table,), "prefetch_table(<a block table>)")
            return
        column = ops.COLUMN
        for row in table.tolist():
            piece = (row[column["sequence"]], row[column["offset"]], row[column["length"]])
            self._call(piece_hook, piece, "prefetch{}".format(piece))

    @staticmethod
    def _call(hook, arguments, call):
        try:
            hook(*arguments)
        except Exception as error:
            # Raised on as it is, with where it came from: a read-ahead that fails is a read
            # that will fail, and is never passed over in silence.
            error.add_note(f"bload read-ahead: raised by dataset.{call}")
            raise
