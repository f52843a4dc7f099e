"""Lengths from where users' data lives, without reading the data: bload.read_lengths.

Each format has one reader. Text, .npy and Megatron .idx files are read by the Rust core (the
CLI's and C++'s readers, through torch.ops.bload.read_lengths), which also decides a file's
format by its first bytes, then its extension (torch.ops.bload.lengths_format). Arrow and Parquet
list columns, and Hugging Face datasets (Arrow tables underneath), hold their lengths in the
column's offsets: pyarrow reads those here, vectorised (pyarrow.compute.list_value_length), and
no row's values are ever turned into Python objects. pyarrow is imported only for those.

A length must be an integer from 1 to 2^32 - 1 whatever the format; an error names the file (or
object), the format, the column and what was expected.
"""

import errno
import os
from typing import Optional

import torch

from bload import _library

_library.load()

__all__ = ["FORMATS", "read_lengths", "write_lengths_cache"]

#: The formats `format=` (and `--lengths-format`) take.
# The formats as the core declares them (torch.ops.bload.lengths_formats(), its LengthsFormat).
_names, _read_by_core = torch.ops.bload.lengths_formats()
FORMATS = tuple(_names)
_CORE = tuple(name for name, by_core in zip(_names, _read_by_core) if by_core)
_MAX_LENGTH = 2**32 - 1


def read_lengths(
    source, *, format: Optional[str] = None, column: Optional[str] = None
) -> torch.Tensor:
    """The lengths of the sequences in `source`, as int64 [sequences].

    source: a path (text, .npy, Megatron .idx, Arrow IPC file or stream, Parquet), a
    `datasets.Dataset`, or a pyarrow Table, ChunkedArray or list Array. format: one of FORMATS, to
    force it on a path (default: its first bytes, then its extension). column: the list column of
    an Arrow or Parquet file, a dataset or a table (default: its only list column).
    """
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if format is not None and format not in FORMATS:
            raise ValueError(f"format = {format!r}: expected one of {', '.join(FORMATS)}")
        if format is None and os.path.exists(path) and not os.path.isfile(path):
            # A pipe, FIFO or device can be read once only: the core decides its format from
            # the bytes it reads (text, .npy or .idx), so nothing is read twice.
            return torch.ops.bload.read_lengths(path, None)
        format = format or torch.ops.bload.lengths_format(path)
        if format in _CORE:
            if column is not None:
                raise ValueError(
                    f"column = {column!r}: expected None for {path} ({format}): columns are "
                    "Arrow's and Parquet's"
                )
            return torch.ops.bload.read_lengths(path, format)
        table = _read_table(path, format, column)
        return _column_lengths(table, column, f"{path} ({format})")
    if format is not None:
        raise ValueError(
            f"format = {format!r}: expected None for a {type(source).__name__} (format names a file's)"
        )
    if _is_hf_dataset(source):
        # A selected, shuffled, filtered or sorted dataset's rows are the table's rows its
        # indices mapping names, in its order: the lengths are taken through it before they are
        # checked, so a row left out is not read and an error names the row the user sees.
        indices = getattr(source, "_indices", None)
        rows = None if indices is None else indices.column(0)
        return _column_lengths(source.data.table, column, "the datasets.Dataset", rows)
    return _column_lengths(source, column, f"the {type(source).__name__}")


def write_lengths_cache(source, out, *, format=None, column=None, dtype="int64") -> str:
    """Writes the lengths of `source` (as read_lengths takes it) to `out`, a 1-D .npy of int64 or
    int32 that every bload reader takes, through a temporary file renamed at the end. Returns
    out's path. `python -m bload lengths IN --column C --out F.npy` does the same from a shell;
    `bload lengths` (Rust) writes the same file for text, .npy and .idx. out must be a new path
    or a regular file (replaced), in a directory that exists. Needs NumPy."""
    import numpy as np

    if dtype not in ("int64", "int32"):
        raise ValueError(f"dtype = {dtype!r}: expected 'int64' or 'int32'")
    out = os.fspath(out)
    _check_output(out)
    lengths = read_lengths(source, format=format, column=column).numpy()
    if dtype == "int32" and lengths.size and lengths.max() > np.iinfo(np.int32).max:
        index = int(np.argmax(lengths > np.iinfo(np.int32).max))
        raise ValueError(
            f"lengths[{index}] = {lengths[index]}: expected lengths below 2^31 for an int32 cache "
            "(write int64 instead)"
        )
    temporary = f"{out}.tmp{os.getpid()}"
    try:
        with open(temporary, "wb") as file:
            np.save(file, lengths.astype(dtype))
        os.replace(temporary, out)
    except OSError as err:
        if err.errno != errno.ENOSPC:
            raise
        # Name the user's path, not the temporary file it was written to.
        raise OSError(
            errno.ENOSPC,
            f"out = {out}: no space left on its device while writing {lengths.size} lengths "
            "(the temporary file beside it removed): expected room for them",
        ) from None
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
    return out


def _check_output(out):
    """Refuses an output path that the rename at the end would harm or fail on: one that exists
    and is not a regular file (a device, such as /dev/null, which root's rename would replace; a
    directory; a link), or one whose directory does not exist."""
    if isinstance(out, str) and not out:
        raise ValueError("out = '': expected the path of the file to write")
    if isinstance(out, str) and "\x00" in out:
        raise ValueError(
            f"out = {out!r}: expected a path without a NUL byte (\\x00), which no file's path "
            "can contain"
        )
    if os.path.lexists(out):
        if os.path.islink(out) or not os.path.isfile(out):
            kind = (
                "a symbolic link"
                if os.path.islink(out)
                else "a directory"
                if os.path.isdir(out)
                else "a device or other special file"
            )
            raise ValueError(
                f"out = {out}: {kind}: expected a new path or a regular file, which the lengths "
                "replace"
            )
        return
    directory = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(directory):
        raise FileNotFoundError(
            errno.ENOENT,
            f"out = {out}: its directory {directory} does not exist: expected a path "
            "in an existing directory",
        )


def _is_hf_dataset(source) -> bool:
    """A datasets.Dataset, recognised without importing datasets."""
    kind = type(source)
    return kind.__name__ == "Dataset" and kind.__module__.startswith("datasets")


def _read_table(path, format, column):
    """The table of an Arrow or Parquet file, holding `column` at least (all of an Arrow file,
    mapped rather than read; Parquet's column alone, which must be decoded to reach its offsets)."""
    import pyarrow as pa

    where = f"{path} ({format})"
    try:
        if format == "parquet":
            import pyarrow.parquet as pq

            schema = pq.read_schema(path)
            column = column if column is not None else _only_list_column(schema, where)
            if column not in schema.names:
                raise ValueError(
                    f"{where}: column {column!r} not found: expected one of {schema.names}"
                )
            _check_list(schema.field(column).type, where, column)
            return pq.read_table(path, columns=[column], memory_map=True)
        source = pa.memory_map(path)
        try:
            return pa.ipc.open_file(source).read_all()
        except pa.ArrowInvalid:
            # Hugging Face datasets' cache files are Arrow streams, not IPC files.
            source.seek(0)
            return pa.ipc.open_stream(source).read_all()
    except (pa.ArrowException, OSError) as err:
        expected = "a Parquet file" if format == "parquet" else "an Arrow IPC file or stream"
        raise ValueError(f"{where}: expected {expected} ({err})") from None


def _only_list_column(schema, where):
    lists = [field.name for field in schema if _is_list(field.type)]
    if len(lists) != 1:
        raise ValueError(
            f"{where}: column = None: expected column= naming a list column, since the file has "
            f"{len(lists)} ({lists})"
        )
    return lists[0]


def _is_list(kind) -> bool:
    import pyarrow as pa

    return pa.types.is_list(kind) or pa.types.is_large_list(kind)


def _check_list(kind, where, column):
    if not _is_list(kind):
        raise ValueError(
            f"{where} column {column!r} = a column of {kind}: expected a list column "
            "(list<...> or large_list<...>), whose offsets hold the lengths"
        )


def _column_lengths(table, column, where, rows=None) -> torch.Tensor:
    """The lengths of a list column of `table` (a pyarrow Table, or a column itself), from its
    offsets: pyarrow.compute.list_value_length, vectorised, values never read. rows: the rows
    to take, in order (a datasets.Dataset's indices mapping, an integer Array or ChunkedArray),
    or None for all; the lengths are checked after they are taken, so errors name their
    positions among `rows`."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(table, pa.Table):
        column = column if column is not None else _only_list_column(table.schema, where)
        if column not in table.column_names:
            raise ValueError(
                f"{where}: column {column!r} not found: expected one of {table.column_names}"
            )
        array = table.column(column)
    elif isinstance(table, (pa.ChunkedArray, pa.Array)):
        if column is not None:  # an array is one column already: the name would go unread
            raise ValueError(
                f"column = {column!r}: expected None for {where}, a column itself (column= "
                "names a column of a table, a file or a dataset)"
            )
        array = table
    else:
        raise TypeError(
            f"lengths source = a {type(table).__name__}: expected a path, a datasets.Dataset or a "
            "pyarrow Table, ChunkedArray or list Array"
        )
    _check_list(array.type, where, column)
    lengths = pc.list_value_length(array)
    if rows is not None:
        lengths = _take(lengths, rows, where, column)
    elif lengths.null_count:
        row = int(pc.index(pc.is_null(lengths), True).as_py())
        raise ValueError(f"{where} column {column!r}[{row}] = null: expected a list (a sequence)")
    else:
        lengths = lengths.to_numpy()
    if lengths.size == 0:
        raise ValueError(f"{where} column {column!r} = no rows: expected at least one sequence")
    bad = lengths < 1
    if lengths.dtype == np.int64:  # large_list: lengths may pass 32 bits
        bad |= lengths > _MAX_LENGTH
    if bad.any():
        row = int(np.argmax(bad))
        raise ValueError(
            f"{where} column {column!r}[{row}] = a list of {lengths[row]}: expected a sequence "
            "length from 1 to 4294967295 (filter out empty rows first)"
        )
    # Arrow's int64 lengths are read-only: a copy, which torch may write to.
    return torch.from_numpy(lengths.astype(np.int64, copy=not lengths.flags.writeable))


def _take(lengths, rows, where, column):
    """lengths (pyarrow's, of a column's rows) at `rows`, in their order, as NumPy: null rows
    among them refused, naming their position in `rows`; rows left out are never checked."""
    import numpy as np
    import pyarrow.compute as pc

    rows = rows.to_numpy()
    nulls = None
    if lengths.null_count:
        nulls = pc.is_null(lengths).to_numpy(zero_copy_only=False)[rows]
        lengths = pc.fill_null(lengths, 0)
    lengths = np.take(lengths.to_numpy(), rows)
    if nulls is not None and nulls.any():
        row = int(np.argmax(nulls))
        raise ValueError(f"{where} column {column!r}[{row}] = null: expected a list (a sequence)")
    return lengths
