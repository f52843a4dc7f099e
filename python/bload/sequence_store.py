"""bload.SequenceStore: a store that bload.store.write made, read as a map-style dataset of the
mapped files. Items and get_range are copies, the caller's own: a view of a copy-on-write
mapping, written to, would change what every later read of the same store object sees.
BlockDataset reads views instead (_views), which it only copies into its batch, so that it
copies exactly the packed steps, once.

Everything the header promises is checked when the store is opened, by the Rust core (format and
version, fields' dtypes and shapes, the offsets' size, CRC-32, order and total, each field file's
size: torch.ops.bload.open_store, which C++'s bload::SequenceStore calls too), and an error names
the file and what was expected. A file can still shrink later, while mapped (another
process rewrites it): reading the lost pages would kill the process with SIGBUS, so each read
first checks, with one fstat per field, that the files still hold the steps the header says.
(A file that shrinks between that check and the copy of the view is beyond any reader's check.)

The fields are chosen by name, as C++'s bload::SequenceStore chooses them (its data and target
arguments, "data" and "target" by default): an item is the named fields in the order named,
whatever their order in the header, so a store written with fields=("target", "data") still
serves its data as data.

The mapping is made lazily in each process and never pickled: a DataLoader worker gets the path
and opens its own (also after fork, where the pid tells a copy from the original). It is mapped
with mmap and torch.frombuffer, not NumPy, which bload does not require.
"""

import array
import json
import mmap
import numbers
import os

import torch

from bload import _library
from bload._store_paths import HEADER
from bload.block_batch import SAMPLER_NOT_BATCH_SAMPLER, BlockBatch
from bload.ops import COLUMN
from bload.store import TORCH_DTYPES

_library.load()

__all__ = ["SequenceStore", "StoreError"]


class StoreError(ValueError):
    """A store that is not what its header, or the format, says."""


class SequenceStore(torch.utils.data.Dataset):
    """The sequence store at `path` (see bload.store). Item i is a tuple of tensors [T_i, ...],
    one per name in `fields`, in that order: by default (data, target), what BlockDataset takes
    (a store written with other fields names them: fields=("x", "mask", "tok"), or fields="x"
    for a tuple of one). `lengths` is int64 [count]; `get_range(i, offset, length)` is steps
    [offset, offset + length) of item i."""

    def __init__(self, path, fields=("data", "target"), *, verify=False):
        self.path = os.fspath(path)
        self._names = _field_names(fields)
        self._open_header()
        self._pid = None
        if verify:
            self.verify()

    def __getstate__(self):
        return {"path": self.path, "fields": self._names}  # verified, if asked, where opened

    def __setstate__(self, state):
        # Pickles from before fields= hold the path alone: the default fields.
        self.__init__(state["path"], state.get("fields", ("data", "target")))

    def __len__(self):
        return self.count

    def __repr__(self):
        fields = ", ".join(f"{f['name']}: {f['dtype']} {f['shape']}" for f in self.fields)
        return f"SequenceStore({self.path!r}, {self.count} sequences, {self.steps} steps; {fields})"

    def _open_header(self):
        offsets, layout = _open_layout(self.path)
        self.count, self.steps = layout["count"], layout["steps"]
        # self.fields: the header's entries of the fields named, in the order named.
        by_name = {field["name"]: field for field in layout["fields"]}
        missing = [name for name in self._names if name not in by_name]
        if missing:
            raise StoreError(
                f"fields = {self._names}: {', '.join(map(repr, missing))} not in the store "
                f"{self.path}: expected names among its fields ({', '.join(by_name)})"
            )
        self.fields = [by_name[name] for name in self._names]
        # The fields' CRC-32s, which the core's layout does not carry: from the header itself.
        with open(os.path.join(self.path, HEADER)) as file:
            header_fields = json.load(file).get("fields", [])
        self._header_crcs = {
            entry.get("name"): entry["crc32"]
            for entry in header_fields
            if isinstance(entry, dict) and isinstance(entry.get("crc32"), int)
        }
        # Each field file's identity as the header was read: a process maps the files later
        # (DataLoader workers, after a fork), and a store replaced in between (store.write with
        # overwrite=True) has new files that the old offsets would cut at the wrong places.
        self._identities = [_identity(os.stat(field["path"])) for field in self.fields]
        self._offsets = offsets  # int64 [count + 1], for the core's read ranges
        # The same offsets as an array of int64 (8 bytes each, as the tensor): indexing it gives
        # a Python int in tens of nanoseconds, a tensor's element takes microseconds.
        self.offsets = array.array("q", bytes(8 * len(offsets)))
        torch.frombuffer(self.offsets, dtype=torch.int64).copy_(offsets)
        self.lengths = offsets.diff()

    def verify(self):
        """Reads every byte of this store's fields and compares each file's CRC-32 with the one
        its header keeps (the offsets' is checked at every open): a flipped bit is a StoreError
        naming the file. Costs a read of the whole files (docs/data.md gives the rate); a store
        written before the header kept them (no crc32 in a field) is refused, naming it."""
        for field in self.fields:
            expected = self._header_crcs.get(field["name"])
            if expected is None:
                raise StoreError(
                    f"{field['path']}: no CRC-32 in the store's header (written before bload.store "
                    "kept them): expected one to verify against; write the store again"
                )
            found = _crc32_of(field["path"])
            if found != expected:
                raise StoreError(
                    f"{field['path']} = bytes of CRC-32 {found:#010x}: expected {expected:#010x}, "
                    "as the header says (the file was changed or damaged after it was written)"
                )

    def _check_size(self, field, size):
        """Refuses a field file that no longer holds the bytes the header says (it changed
        while mapped: reading its lost pages would raise SIGBUS)."""
        if size != field["bytes"]:
            raise StoreError(
                f"{field['path']} = a file of {size} bytes: expected {field['bytes']} bytes, as the "
                "offsets say (the file changed while mapped)"
            )

    def _map(self):
        """This process's mappings, one tensor [steps, *shape] per field, and the files'
        descriptors for the size checks."""
        self._maps, self._fds = [], []
        for field in self.fields:
            fd = os.open(field["path"], os.O_RDONLY | os.O_CLOEXEC)
            self._fds.append(fd)
            status = os.fstat(fd)
            if _identity(status) != self._identities[len(self._fds) - 1]:
                raise StoreError(
                    f"{field['path']}: another file than when the store was opened (replaced "
                    "after it: its offsets no longer describe it): expected the store as it was "
                    "opened; open it again (bload.SequenceStore(path)) to read the new one"
                )
            self._check_size(field, status.st_size)
            dtype, shape = TORCH_DTYPES[field["dtype"]], (self.steps, *field["shape"])
            if field["bytes"] == 0:  # no step has an element: nothing to map
                self._maps.append(torch.zeros(shape, dtype=dtype))
                continue
            # Copy-on-write (MAP_PRIVATE): torch.frombuffer takes a writable buffer, and nothing
            # written to it could reach the file or another process.
            mapping = mmap.mmap(fd, field["bytes"], access=mmap.ACCESS_COPY)
            self._maps.append(torch.frombuffer(mapping, dtype=dtype).view(shape))
        self._pid = os.getpid()

    def __del__(self):
        for fd in getattr(self, "_fds", []) if getattr(self, "_pid", None) == os.getpid() else []:
            try:
                os.close(fd)
            except OSError:
                pass

    def _check_range(self, index, offset, length):
        """Steps [start, end) of the store that the range is, or an IndexError naming it."""
        if isinstance(index, bool) or not isinstance(index, numbers.Integral):
            raise TypeError(_not_an_index(index, self.path))
        if not 0 <= index < self.count:
            raise IndexError(f"index = {index}: expected 0 <= index < {self.count} ({self.path})")
        if type(offset) is not int or type(length) is not int:  # a batch's pieces are ints
            for name, value in (("offset", offset), ("length", length)):
                if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                    # A float failed in slicing, naming nothing; True was read as step 1.
                    raise TypeError(
                        f"{name} = {value!r:.80}: expected an int of steps ({self.path})"
                    )
        start, end = self.offsets[index], self.offsets[index + 1]
        if not (0 <= offset and 0 <= length and offset + length <= end - start):
            raise IndexError(
                f"steps [{offset}, {offset + length}) of sequence {index}: expected a range within its "
                f"{end - start} steps ({self.path})"
            )
        return start + offset, start + offset + length

    def _views(self, index, offset, length):
        """get_range's steps as views of this process's mappings, which share their memory with
        every other read of the same steps: for BlockDataset, which only copies them into its
        batch."""
        return self._range_views([(index, offset, length)])[0]

    def _range_views(self, pieces):
        """_views of each (index, offset, length) of `pieces`: a batch's reads. Reading a view
        after its file shrinks kills the process (SIGBUS): the check before is one fstat a field
        for the whole batch, and a file truncated after it is beyond any reader's check."""
        if self._pid != os.getpid():
            self._map()
        for field, fd in zip(self.fields, self._fds):
            # A file shrunk since it was mapped would raise SIGBUS on the lost pages: refuse.
            self._check_size(field, os.fstat(fd).st_size)
        views = []
        for index, offset, length in pieces:
            first, last = self._check_range(index, offset, length)
            views.append(tuple(steps[first:last] for steps in self._maps))
        return views

    def get_range(self, index, offset, length):
        """Steps [offset, offset + length) of sequence `index`, one tensor per field: copies of
        the mapped files, the caller's own (writing to one changes no later read)."""
        return tuple(steps.clone() for steps in self._views(index, offset, length))

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
        first, last = self._check_range(index, 0, 0)
        return self.get_range(index, 0, self.offsets[index + 1] - first)


def _open_layout(path):
    """The store at `path` opened and checked: its offsets (int64 [count + 1]) and its layout
    (count, steps and each field's name, dtype, shape, path, step_bytes and bytes), or a
    StoreError naming the file and what was expected. The core reads and checks the header (its
    fields' names distinct, as fields are read by name), the offsets and the files' sizes
    (src/store.rs, C++'s reader's checker too)."""
    try:
        offsets, layout = torch.ops.bload.open_store(path)
    except RuntimeError as err:
        raise StoreError(_header_detail(path, str(err).split("\n")[0])) from None
    return offsets, json.loads(layout)


def _crc32_of(path, chunk=1 << 20):
    import zlib

    crc = 0
    with open(path, "rb") as file:
        while block := file.read(chunk):
            crc = zlib.crc32(block, crc)
    return crc


def _identity(status):
    """A file's identity: its device and inode, and when it was last changed."""
    return (status.st_dev, status.st_ino, status.st_mtime_ns)


def _field_names(fields):
    """fields= as a tuple of one or more distinct names."""
    names = (fields,) if isinstance(fields, str) else fields
    try:
        names = tuple(names)
    except TypeError:
        names = None
    if (
        not names
        or not all(isinstance(name, str) for name in names)
        or len(set(names)) < len(names)
    ):
        raise TypeError(
            f"fields = {fields!r}: expected a field's name or a tuple of distinct names, e.g. "
            '("data", "target")'
        )
    return names


def _not_an_index(index, path):
    """The error of an index that is not an int: a BlockBatch means the sampler was passed as
    sampler= rather than batch_sampler=."""
    if isinstance(index, BlockBatch) or (
        isinstance(index, list) and index and isinstance(index[0], BlockBatch)
    ):
        return f"SequenceStore({path!r})[a BlockBatch]: {SAMPLER_NOT_BATCH_SAMPLER}"
    return f"index = {index!r:.80}: expected an int, a sequence's index ({path})"


def _header_detail(path, message):
    """The core's error, or, where it says only that the header lacks its numbers and fields
    ("a header without them"), which of them has what value."""
    if "a header without them" not in message:
        return message
    header_path = os.path.join(path, "header.json")
    try:
        with open(header_path) as file:
            header = json.load(file)
    except (OSError, ValueError):
        return message
    for key in ("count", "steps", "offsets_crc32"):
        value = header.get(key, "missing")
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**64:
            shown = "missing" if key not in header else f"{value!r:.60}"
            return (
                f"{header_path} = a header whose {key} is {shown}: expected {key} an integer "
                "from 0 to 2^64 - 1"
            )
    if not isinstance(header.get("fields"), list):
        shown = "missing" if "fields" not in header else f"{header['fields']!r:.60}"
        return (
            f"{header_path} = a header whose fields is {shown}: expected fields a list of "
            "{name, dtype, shape, file}"
        )
    return message
