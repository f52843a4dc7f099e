"""Hugging Face datasets as they are: bload.HFSequences serves a datasets.Dataset's list columns
to bload.BlockDataset without converting a row to Python lists.

A datasets.Dataset is an Arrow table (memory-mapped from its cache files) and, once selected,
shuffled or sorted, an indices mapping from its rows to the table's. A list column keeps its
rows' steps end to end in one values array and where each row starts in its offsets, so a row's
length is an offsets difference (bload.read_lengths) and steps [offset, offset + length) of a
row are a slice of the values: get_range slices them and hands NumPy's view of the slice to
torch, a copy of nothing when the values are primitive and have no nulls.
"""

import bisect
import warnings

import torch

from bload.lengths import read_lengths

__all__ = ["HFSequences", "list_steps"]


def list_steps(array, row, offset, length):
    """Steps [offset, offset + length) of row `row` of a list Array (length None: to the row's
    end), as a NumPy array [length, *step_shape]: a view of the values where Arrow allows it.
    A step may itself be a list of equal sizes (list<list<float>>: step shape [width])."""
    start = array.offsets[row].as_py()
    end = array.offsets[row + 1].as_py()
    length = end - start - offset if length is None else length
    if not (0 <= offset and 0 <= length and start + offset + length <= end):
        raise IndexError(
            f"steps [{offset}, {offset + length}) of row {row}: expected a range within its "
            f"{end - start} steps"
        )
    if length == 0 and end > start:
        # An empty range still has the steps' shape: that of the row's first step.
        return _numpy(array.values.slice(start, 1), 1)[:0]
    steps = array.values.slice(start + offset, length)
    return _numpy(steps, length)


def _numpy(steps, length):
    import pyarrow as pa

    kind = steps.type
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        flat = steps.flatten()
        width = len(flat) // length if length else 0
        if pa.types.is_fixed_size_list(kind):
            width = kind.list_size
        elif length and len(flat) != width * length or not _uniform(steps, width):
            raise ValueError(
                f"a list column of {kind} with steps of unequal sizes: expected every step of "
                "a sequence to have the same shape"
            )
        inner = _numpy(flat, len(flat))
        return inner.reshape(length, width, *inner.shape[1:])
    if steps.null_count:
        raise ValueError(f"a list column of {kind} with null steps: expected no nulls")
    return steps.to_numpy(zero_copy_only=False)


def _uniform(steps, width):
    import pyarrow.compute as pc

    if len(steps) == 0:
        return True
    sizes = pc.list_value_length(steps)
    return pc.min(sizes).as_py() == width and pc.max(sizes).as_py() == width


def _tensor(array):
    """torch's view of a NumPy array that Arrow may have left read-only (torch would warn that
    writing to it is undefined; BlockDataset only copies from it)."""
    import numpy as np  # with pyarrow, which converts to it: bload does not require it

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(np.asarray(array))


class HFSequences(torch.utils.data.Dataset):
    """A datasets.Dataset as (data, target) sequences for bload.BlockDataset: item i is row i's
    `data` and `target` list columns as tensors [T_i, ...], T_i the row's list length.

        sequences = bload.HFSequences(ds, data="input_ids", target="labels")
        sampler = bload.BlockSampler(sequences.lengths, t_max=1024, blocks_per_batch=8)
        loader = DataLoader(bload.BlockDataset(sequences, t_max=1024), batch_sampler=sampler,
                            collate_fn=bload.collate)

    target=None serves the data as its own target (a language model shifts it in the loss).
    lengths come from the data column's offsets; the target's must be the same.
    """

    def __init__(self, dataset, data="input_ids", target="labels"):
        self.dataset = dataset
        self.data, self.target = data, target
        self.lengths = read_lengths(dataset, column=data)
        if target is not None and target != data:
            target_lengths = read_lengths(dataset, column=target)
            if not torch.equal(target_lengths, self.lengths):
                row = int((target_lengths != self.lengths).nonzero()[0])
                raise ValueError(
                    f"row {row}: column {target!r} has {int(target_lengths[row])} steps and "
                    f"{data!r} {int(self.lengths[row])}: expected the same lengths"
                )
        self._columns = None

    def __len__(self):
        return len(self.lengths)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_columns"] = None
        return state

    def _open(self):
        """The columns' chunks and where each starts, once per process (the table is mapped
        from the cache files; nothing of it is copied)."""
        table = self.dataset.data.table
        names = [self.data] if self.target in (None, self.data) else [self.data, self.target]
        self._columns = []
        for name in names:
            chunks = table.column(name).chunks
            starts = [0]
            for chunk in chunks:
                starts.append(starts[-1] + len(chunk))
            self._columns.append((chunks, starts))
        indices = getattr(self.dataset, "_indices", None)
        self._rows = None if indices is None else indices.column(0).to_numpy()

    def get_range(self, index, offset, length):
        """Steps [offset, offset + length) of item `index`'s data and target, as tensors over
        the Arrow values (read-only: BlockDataset copies them into the packed batch)."""
        if not 0 <= index < len(self.lengths):
            raise IndexError(f"index = {index}: expected 0 <= index < {len(self.lengths)}")
        if self._columns is None:
            self._open()
        row = index if self._rows is None else int(self._rows[index])
        steps = []
        for chunks, starts in self._columns:
            chunk = bisect.bisect_right(starts, row) - 1
            steps.append(
                _tensor(list_steps(chunks[chunk], row - int(starts[chunk]), offset, length))
            )
        return (steps[0], steps[-1])

    def __getitem__(self, index):
        return self.get_range(index, 0, int(self.lengths[index]))
