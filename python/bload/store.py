"""bload's sequence store: variable-length sequences laid end to end on disk, so that a packed
batch is a copy of exactly the steps it holds (docs/data.md, "The sequence store").

A store is a directory:
- `header.json`: {"format": "bload-sequence-store", "version": 1, "count": N, "steps": S,
  "offsets_crc32": C, "fields": [{"name": "data", "dtype": "float32", "shape": [40],
  "file": "data.bin", "crc32": D}, ...]}, D the field file's CRC-32 (optional: read by
  SequenceStore(verify=True) only, which refuses a store without it);
- `offsets.bin`: int64 little-endian [N + 1], 0 first, strictly increasing, S last; sequence i
  is steps [offsets[i], offsets[i + 1]) of every field, whose CRC-32 is C;
- one file per field: its steps end to end, S x shape elements of dtype, little-endian.

Raw files rather than .npy, so that a C++ reader maps them with no header to parse, and one
offsets array for all fields, since a step of data and a step of target go together. A store is
written into a temporary directory renamed at the end, so a half-written one is never found at
the path. The Rust core checks all of this when a store is opened (src/store.rs), for both
readers: bload.SequenceStore (sequence_store.py) and C++'s bload::SequenceStore.
"""

import errno
import functools
import json
import os
import shutil
import sys
import zlib

import torch

from bload._store_paths import HEADER, OFFSETS, check_replaceable, checked_fields, remove
from bload._store_sources import dataset_rows, npy_directory

# DTYPES is the module's __getattr__'s, made on first use.
__all__ = ["FORMAT", "VERSION", "DTYPES", "TORCH_DTYPES", "write"]  # noqa: F822

FORMAT = "bload-sequence-store"
VERSION = 1
#: The dtypes a field may have: name -> torch dtype (what the reader maps it as).
TORCH_DTYPES = {
    "bool": torch.bool,
    "uint8": torch.uint8,
    "uint16": torch.uint16,
    "uint32": torch.uint32,
    "uint64": torch.uint64,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
}
# The NumPy dtype of each field's bytes (bfloat16, which NumPy lacks, as its 16-bit words).
_NUMPY_NAMES = {"bool": "bool", "bfloat16": "<u2"}


@functools.cache
def _numpy_dtypes():
    import numpy as np

    return {
        key: (
            np.dtype(_NUMPY_NAMES[key] if key in _NUMPY_NAMES else "<" + np.dtype(key).str[1:]),
            dtype,
        )
        for key, dtype in TORCH_DTYPES.items()
    }


def __getattr__(name):
    # DTYPES (name -> (NumPy dtype of its bytes, torch dtype)) is made on first use: NumPy, which
    # only the writer needs, is not imported with bload.
    if name == "DTYPES":
        return _numpy_dtypes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def write(
    path,
    items,
    *,
    fields=("data", "target"),
    columns=None,
    total=None,
    progress=True,
    overwrite=False,
) -> str:
    """Writes a store at `path` from `items`, streaming (one item in memory at a time), and returns
    its path. items is one of:
    - an iterable of items, each a tuple of one array or tensor per field ([T, *step_shape], the
      same T for all fields), a dict by field name (its keys the fields', no other), or, with
      one field, the array alone;
    - a datasets.Dataset: `columns` names its list column for each field (default `fields`);
    - a directory of .npy files, one item each, in name order: with one field, its .npy files;
      with several, a subdirectory per field holding files of the same names (no other).
    Each field's dtype and step shape are those of its first item; later items must match.
    fields: distinct names, each its field's file in the store with .bin added: not empty, '.'
    or '..', without '/' or NUL, and not 'offsets' (offsets.bin is the store's own).
    total: the item count, for the progress bar (tqdm, on stderr) when items has no len().
    overwrite: replace what is at `path` if it is a store (or an empty directory), never another
    file or directory.
    Read it back with bload.SequenceStore(path, fields=...), which takes fields by name.
    """
    for flag, value in (("overwrite", overwrite), ("progress", progress)):
        if not isinstance(value, bool):  # overwrite="no" is truthy: it would replace the store
            raise TypeError(f"{flag} = {value!r:.80}: expected True or False")
    fields = checked_fields(fields)
    path = os.fspath(path)
    if os.path.lexists(path):
        if not overwrite:
            raise FileExistsError(
                f"path = {path}: expected a path where no store is yet (or overwrite=True)"
            )
        check_replaceable(path)
    if isinstance(items, (str, os.PathLike)):
        items, total = npy_directory(os.fspath(items), fields)
    elif type(items).__name__ == "Dataset" and type(items).__module__.startswith("datasets"):
        items, total = dataset_rows(items, fields, columns), len(items)
    elif total is None and hasattr(items, "__len__"):
        total = len(items)
    parent = os.path.dirname(os.path.abspath(path))
    temporary = os.path.join(parent, f".{os.path.basename(path)}.tmp{os.getpid()}")
    shutil.rmtree(temporary, ignore_errors=True)
    os.makedirs(temporary)
    try:
        try:
            _write_into(temporary, items, fields, total, progress)
        except OSError as err:
            if err.errno != errno.ENOSPC:
                raise
            # Name the user's path, not the temporary directory it was written into.
            raise OSError(
                errno.ENOSPC,
                f"path = {path}: no space left on its device while writing the store (in "
                f"{temporary}, removed): expected room for it",
            ) from None
        if os.path.lexists(path):
            old = f"{temporary}.old"
            remove(old)  # another run's, of the same pid, that died between these renames
            os.rename(path, old)
            os.rename(temporary, path)
            remove(old)
        else:
            os.rename(temporary, path)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return path


def _write_into(directory, items, fields, total, progress):
    if sys.byteorder != "little":
        raise RuntimeError("bload.store.write: stores are little-endian; this machine is not")
    described = None
    files = {name: open(os.path.join(directory, f"{name}.bin"), "wb") for name in fields}
    offsets_file = open(os.path.join(directory, OFFSETS), "wb")
    bar = _progress(total, progress)
    steps, count, crc = 0, 0, 0
    # Each field file's CRC-32, for readers that verify its bytes (SequenceStore(verify=True)).
    field_crcs = dict.fromkeys(fields, 0)
    try:
        first = (0).to_bytes(8, "little", signed=True)
        offsets_file.write(first)
        crc = zlib.crc32(first, crc)
        for item in items:
            arrays = _item_arrays(item, fields, count)
            if described is None:
                described = [_describe(name, array, count) for name, array in zip(fields, arrays)]
            # Every field checked before any is written: a bad item is named as such, not by
            # what writing it would break.
            for (name, dtype, shape), array in zip(described, arrays):
                _check_item(name, dtype, shape, array, count)
                if len(array) == 0:
                    raise ValueError(
                        f"item {count}: field {name!r} has 0 steps: expected a sequence of at "
                        "least one step"
                    )
                if len(array) != len(arrays[0]):
                    raise ValueError(
                        f"item {count}: field {name!r} has {len(array)} steps and {fields[0]!r} "
                        f"{len(arrays[0])}: expected the same steps in every field (they share "
                        "offsets)"
                    )
            for name, array in zip(fields, arrays):
                data = _bytes(array)
                files[name].write(data)
                field_crcs[name] = zlib.crc32(data, field_crcs[name])
            steps += len(arrays[0])
            count += 1
            word = steps.to_bytes(8, "little", signed=True)
            offsets_file.write(word)
            crc = zlib.crc32(word, crc)
            bar.update(1)
        for file in [*files.values(), offsets_file]:
            file.flush()
            os.fsync(file.fileno())
    finally:
        bar.close()
        # Closed whatever happened; on a failure, an error of closing (a full disk again) must
        # not hide the first.
        for file in [*files.values(), offsets_file]:
            try:
                file.close()
            except OSError:
                if sys.exc_info()[0] is None:
                    raise
    if count == 0:
        raise ValueError("items: no item: expected at least one sequence")
    header = {
        "format": FORMAT,
        "version": VERSION,
        "count": count,
        "steps": steps,
        "offsets_crc32": crc,
        "fields": [
            {
                "name": name,
                "dtype": dtype,
                "shape": list(shape),
                "file": f"{name}.bin",
                "crc32": field_crcs[name],
            }
            for name, dtype, shape in described
        ],
    }
    with open(os.path.join(directory, HEADER), "w") as file:
        json.dump(header, file, indent=1)
        file.flush()
        os.fsync(file.fileno())


def _progress(total, enabled):
    if enabled:
        try:
            from tqdm.auto import tqdm

            return tqdm(total=total, unit="seq", desc="bload store", file=sys.stderr)
        except ImportError:
            pass

    class Silent:
        def update(self, n):
            pass

        def close(self):
            pass

    return Silent()


def _item_arrays(item, fields, index):
    if isinstance(item, dict):
        missing = [name for name in fields if name not in item]
        if missing:
            raise ValueError(
                f"item {index}: fields {missing} missing: expected keys {list(fields)}"
            )
        if len(item) != len(fields):  # a key that no field names: its arrays would be lost
            unknown = [key for key in item if key not in fields]
            raise ValueError(
                f"item {index}: keys {unknown!r:.200} not among the fields: expected keys "
                f"{list(fields)} (name every array to write in fields=)"
            )
        item = tuple(item[name] for name in fields)
    elif len(fields) == 1 and not isinstance(item, (tuple, list)):
        item = (item,)
    if not isinstance(item, (tuple, list)) or len(item) != len(fields):
        raise ValueError(
            f"item {index} = a {type(item).__name__}: expected a tuple of {len(fields)} arrays "
            f"({', '.join(fields)})"
        )
    return [_as_numpy(array, fields[i], index) for i, array in enumerate(item)]


def _as_numpy(array, name, index):
    import numpy as np  # the writer's alone: bload does not require it

    if isinstance(array, torch.Tensor):
        array = array.detach().cpu().contiguous()
        if array.dtype == torch.bfloat16:
            return _bfloat16_words(array.view(torch.int16).numpy().view("<u2"))
        return array.numpy()
    array = np.asarray(array)
    if array.ndim == 0:
        raise ValueError(f"item {index}: field {name!r} is a scalar: expected an array [T, ...]")
    return array


def _bfloat16_words(words):
    """A bfloat16 tensor's 16-bit words (NumPy uint16), marked so that its field is described as
    bfloat16. The class is made on first use, since it derives from NumPy's ndarray."""
    global _Bfloat16
    if _Bfloat16 is None:
        import numpy as np

        class Bfloat16(np.ndarray):
            pass

        _Bfloat16 = Bfloat16
    return words.view(_Bfloat16)


_Bfloat16 = None


def _dtype_name(array):
    """The store's name of an array's dtype (either byte order), or None."""
    if _Bfloat16 is not None and isinstance(array, _Bfloat16):
        return "bfloat16"
    for name, (np_dtype, _) in _numpy_dtypes().items():
        if name != "bfloat16" and (array.dtype.kind, array.dtype.itemsize) == (
            np_dtype.kind,
            np_dtype.itemsize,
        ):
            return name
    return None


def _describe(name, array, index):
    dtype = _dtype_name(array)
    if dtype is None:
        raise ValueError(
            f"item {index}: field {name!r} has dtype {array.dtype}: expected one of "
            f"{', '.join(TORCH_DTYPES)}"
        )
    return name, dtype, tuple(array.shape[1:])


def _check_item(name, dtype, shape, array, index):
    if _dtype_name(array) != dtype or tuple(array.shape[1:]) != shape:
        raise ValueError(
            f"item {index}: field {name!r} = {array.dtype} [T, {', '.join(map(str, array.shape[1:]))}]: "
            f"expected {dtype} [T, {', '.join(map(str, shape))}], as the first item's"
        )


def _bytes(array):
    """The array's steps as little-endian bytes, in C order (a copy only where needed)."""
    import numpy as np

    if array.size == 0:  # steps of no element (a step shape with a 0): no bytes
        return b""
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return memoryview(np.ascontiguousarray(array)).cast("B")
