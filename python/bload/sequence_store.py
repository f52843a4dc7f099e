"""bload.SequenceStore: a store that bload.store.write made, read as a map-style dataset whose
get_range is a view of the mapped files, so that BlockDataset copies exactly the packed steps.

Everything the header promises is checked when the store is opened, by the Rust core (format and
version, fields' dtypes and shapes, the offsets' size, CRC-32, order and total, each field file's
size: torch.ops.bload.open_store, which C++'s bload::SequenceStore calls too), and an error names
the file and what was expected. A file can still shrink later, while mapped (another
process rewrites it): reading the lost pages would kill the process with SIGBUS, so each read
first checks, with one fstat per field, that the files still hold the steps the header says.
(A file that shrinks between that check and the copy of the view is beyond any reader's check.)

The mapping is made lazily in each process and never pickled: a DataLoader worker gets the path
and opens its own (also after fork, where the pid tells a copy from the original).
"""

import json
import mmap
import os

import numpy as np
import torch

from bload import _library
from bload.ops import COLUMN
from bload.store import DTYPES

_library.load()

__all__ = ["SequenceStore", "StoreError"]


class StoreError(ValueError):
    """A store that is not what its header, or the format, says."""


class SequenceStore(torch.utils.data.Dataset):
    """The sequence store at `path` (see bload.store). Item i is a tuple of tensors [T_i, ...],
    one per field in the header's order ((data, target) for a store written with the default
    fields); `lengths` is int64 [count]; `get_range(i, offset, length)` is steps
    [offset, offset + length) of item i, views of the mapped files (copy-on-write: writing to
    them changes neither the file nor another reader)."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self._open_header()
        self._pid = None

    def __getstate__(self):
        return {"path": self.path}

    def __setstate__(self, state):
        self.__init__(state["path"])

    def __len__(self):
        return self.count

    def __repr__(self):
        fields = ", ".join(f"{f['name']}: {f['dtype']} {f['shape']}" for f in self.fields)
        return f"SequenceStore({self.path!r}, {self.count} sequences, {self.steps} steps; {fields})"

    def _open_header(self):
        # The core reads and checks the header, the offsets and the files' sizes (src/store.rs,
        # C++'s reader's checker too); its errors name the file and what was expected.
        try:
            offsets, layout = torch.ops.bload.open_store(self.path)
        except RuntimeError as err:
            raise StoreError(str(err).split("\n")[0]) from None
        layout = json.loads(layout)
        self.count, self.steps, self.fields = layout["count"], layout["steps"], layout["fields"]
        self._offsets = offsets  # int64 [count + 1], for the core's read ranges
        self.offsets = offsets.numpy()
        self.lengths = offsets.diff()

    def _check_size(self, field, size):
        """Refuses a field file that no longer holds the bytes the header says (it changed
        while mapped: reading its lost pages would raise SIGBUS)."""
        if size != field["bytes"]:
            raise StoreError(
                f"{field['path']} = a file of {size} bytes: expected {field['bytes']} bytes, as the "
                "offsets say (the file changed while mapped)"
            )

    def _map(self):
        """This process's mappings, one per field, and the files' descriptors for the size checks."""
        self._maps, self._fds = [], []
        for field in self.fields:
            np_dtype, torch_dtype = DTYPES[field["dtype"]]
            path = field["path"]
            fd = os.open(path, os.O_RDONLY)
            self._fds.append(fd)
            self._check_size(field, os.fstat(fd).st_size)
            shape = (self.steps, *field["shape"])
            if field["bytes"] == 0:
                array = np.zeros(shape, np_dtype)
            else:
                # copy-on-write: writable for torch, private to this process.
                array = np.memmap(path, dtype=np_dtype, mode="c", shape=shape)
            self._maps.append((array, torch_dtype))
        self._pid = os.getpid()

    def __del__(self):
        for fd in getattr(self, "_fds", []) if getattr(self, "_pid", None) == os.getpid() else []:
            try:
                os.close(fd)
            except OSError:
                pass

    def get_range(self, index, offset, length):
        if not 0 <= index < self.count:
            raise IndexError(f"index = {index}: expected 0 <= index < {self.count} ({self.path})")
        start, end = int(self.offsets[index]), int(self.offsets[index + 1])
        if not (0 <= offset and 0 <= length and offset + length <= end - start):
            raise IndexError(
                f"steps [{offset}, {offset + length}) of sequence {index}: expected a range within its "
                f"{end - start} steps ({self.path})"
            )
        if self._pid != os.getpid():
            self._map()
        out = []
        for field, fd, (array, torch_dtype) in zip(self.fields, self._fds, self._maps):
            # A file shrunk since it was mapped would raise SIGBUS on the lost pages: refuse.
            self._check_size(field, os.fstat(fd).st_size)
            steps = torch.from_numpy(array[start + offset : start + offset + length])
            out.append(steps.view(torch_dtype) if field["dtype"] == "bfloat16" else steps)
        return tuple(out)

    def prefetch_table(self, table):
        """Advises the kernel that the pieces of a block table (int64 [pieces, 6]) are read
        next: POSIX_FADV_WILLNEED on exactly the byte ranges of each field file they read (the
        core's, widened to pages), so the kernel reads them in while other work runs.
        BlockDataset calls it for the sampler's next read_ahead batches (docs/read_ahead.md);
        it reads and changes nothing."""
        if self._pid != os.getpid():
            self._map()
        for field, fd in zip(self.fields, self._fds):
            ranges = torch.ops.bload.store_read_ranges(
                self._offsets, field["step_bytes"], field["bytes"], table, mmap.PAGESIZE
            )
            for start, length in ranges.tolist():
                os.posix_fadvise(fd, start, length, os.POSIX_FADV_WILLNEED)

    def prefetch(self, index, offset, length):
        """The same advice for steps [offset, offset + length) of sequence `index` alone."""
        row = torch.zeros(1, len(COLUMN), dtype=torch.long)
        row[0, COLUMN["sequence"]], row[0, COLUMN["offset"]] = index, offset
        row[0, COLUMN["length"]] = length
        self.prefetch_table(row)

    def __getitem__(self, index):
        if not 0 <= index < self.count:
            raise IndexError(f"index = {index}: expected 0 <= index < {self.count} ({self.path})")
        return self.get_range(index, 0, int(self.lengths[index]))
