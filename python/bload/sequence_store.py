"""bload.SequenceStore: a store that bload.store.write made, read as a map-style dataset whose
get_range is a view of the mapped files, so that BlockDataset copies exactly the packed steps.

Everything the header promises is checked when the store is opened (format and version, fields'
dtypes and shapes, the offsets' size, CRC-32, order and total, each field file's size), and an
error names the file and what was expected. A file can still shrink later, while mapped (another
process rewrites it): reading the lost pages would kill the process with SIGBUS, so each read
first checks, with one fstat per field, that the files still hold the steps the header says.
(A file that shrinks between that check and the copy of the view is beyond any reader's check.)

The mapping is made lazily in each process and never pickled: a DataLoader worker gets the path
and opens its own (also after fork, where the pid tells a copy from the original).
"""

import json
import os
import zlib

import numpy as np
import torch

from bload.store import DTYPES, FORMAT, HEADER, OFFSETS, VERSION

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

    def _file(self, name):
        return os.path.join(self.path, name)

    def _error(self, name, found, expected):
        return StoreError(f"{self._file(name)} = {found}: expected {expected}")

    def _open_header(self):
        try:
            with open(self._file(HEADER)) as file:
                header = json.load(file)
        except (OSError, ValueError) as err:
            raise self._error(HEADER, f"unreadable ({err})", f"the JSON header of a {FORMAT}") from None
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise self._error(HEADER, f"format {header.get('format') if isinstance(header, dict) else header!r}",
                              f"format {FORMAT!r}")
        if header.get("version") != VERSION:
            raise self._error(HEADER, f"version {header.get('version')!r}", f"version {VERSION}")
        try:
            self.count, self.steps = int(header["count"]), int(header["steps"])
            crc = int(header["offsets_crc32"])
            self.fields = [dict(field) for field in header["fields"]]
            for field in self.fields:
                field["shape"] = [int(n) for n in field["shape"]]
                field["name"], field["file"], field["dtype"] = str(field["name"]), str(field["file"]), field["dtype"]
        except (KeyError, TypeError, ValueError) as err:
            raise self._error(HEADER, f"a header without {err}",
                              "count, steps, offsets_crc32 and fields (name, dtype, shape, file)") from None
        if self.count < 1 or not self.fields:
            raise self._error(HEADER, f"{self.count} sequences of {len(self.fields)} fields",
                              "at least one sequence and one field")
        for field in self.fields:
            if field["dtype"] not in DTYPES:
                raise self._error(HEADER, f"field {field['name']!r} of dtype {field['dtype']!r}",
                                  f"one of {', '.join(DTYPES)}")
            if os.path.basename(field["file"]) != field["file"] or any(n < 0 for n in field["shape"]):
                raise self._error(HEADER, f"field {field['name']!r} = {field}", "a file name in the store and a shape of sizes")
            np_dtype = DTYPES[field["dtype"]][0]
            field["step_bytes"] = int(np.prod(field["shape"], dtype=np.int64)) * np_dtype.itemsize
            field["bytes"] = self.steps * field["step_bytes"]
        self._check_offsets(crc)
        for field in self.fields:
            self._check_size(field, os.path.getsize(self._file(field["file"])) if os.path.exists(self._file(field["file"])) else -1)

    def _check_offsets(self, crc):
        name = OFFSETS
        expected_size = (self.count + 1) * 8
        size = os.path.getsize(self._file(name)) if os.path.exists(self._file(name)) else None
        if size != expected_size:
            found = "missing" if size is None else f"a file of {size} bytes"
            raise self._error(name, found, f"{expected_size} bytes: {self.count + 1} int64 offsets, as {HEADER} says")
        offsets = np.fromfile(self._file(name), dtype="<i8")
        if zlib.crc32(offsets.tobytes()) != crc:
            raise self._error(name, f"offsets of CRC-32 {zlib.crc32(offsets.tobytes())}",
                              f"the CRC-32 {crc} that {HEADER} says (the file is damaged or another store's)")
        if offsets[0] != 0:
            raise self._error(name, f"a first offset of {offsets[0]}", "0")
        steps = np.diff(offsets)
        if (steps <= 0).any():
            index = int(np.argmax(steps <= 0))
            raise self._error(name, f"offsets[{index}] = {offsets[index]} then offsets[{index + 1}] = "
                              f"{offsets[index + 1]}", "strictly increasing offsets (every sequence has a step)")
        if offsets[-1] != self.steps:
            raise self._error(name, f"a last offset of {offsets[-1]}", f"{self.steps} steps, as {HEADER} says")
        self.offsets = offsets
        self.lengths = torch.from_numpy(steps)

    def _check_size(self, field, size):
        if size != field["bytes"]:
            found = "missing" if size < 0 else f"a file of {size} bytes"
            raise self._error(
                field["file"], found,
                f"{field['bytes']} bytes: {self.steps} steps of {field['dtype']} {field['shape']} "
                f"({field['step_bytes']} bytes each), as the offsets say")

    def _map(self):
        """This process's mappings, one per field, and the files' descriptors for the size checks."""
        self._maps, self._fds = [], []
        for field in self.fields:
            np_dtype, torch_dtype = DTYPES[field["dtype"]]
            path = self._file(field["file"])
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
                f"{end - start} steps ({self.path})")
        if self._pid != os.getpid():
            self._map()
        out = []
        for field, fd, (array, torch_dtype) in zip(self.fields, self._fds, self._maps):
            # A file shrunk since it was mapped would raise SIGBUS on the lost pages: refuse.
            self._check_size(field, os.fstat(fd).st_size)
            steps = torch.from_numpy(array[start + offset:start + offset + length])
            out.append(steps.view(torch_dtype) if field["dtype"] == "bfloat16" else steps)
        return tuple(out)

    def __getitem__(self, index):
        if not 0 <= index < self.count:
            raise IndexError(f"index = {index}: expected 0 <= index < {self.count} ({self.path})")
        return self.get_range(index, 0, int(self.lengths[index]))
