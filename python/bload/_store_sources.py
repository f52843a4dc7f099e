"""Where store.write's items come from besides an iterable: a directory of .npy files, and a
Hugging Face datasets.Dataset's columns, each read as arrays one item at a time."""

import os

__all__ = ["dataset_rows", "npy_directory"]


def npy_directory(directory, fields):
    """A directory of .npy files (one subdirectory per field when there are several) as the
    items store.write takes, and their count: the same file names in every field's directory,
    each file NumPy cannot read named."""
    import numpy as np  # the writer's alone: bload does not require it

    if len(fields) == 1:
        folders = [directory]
    else:
        folders = [os.path.join(directory, name) for name in fields]
        absent = [name for name in fields if not os.path.isdir(os.path.join(directory, name))]
        if os.path.isdir(directory) and absent:
            raise ValueError(
                f"items = {directory}: no subdirectory {', '.join(map(repr, absent))}: expected "
                f"a subdirectory of .npy files per field ({', '.join(fields)}; or fields='data' "
                "for a directory of one field's .npy files)"
            )
    listed = [sorted(e for e in os.listdir(folder) if e.endswith(".npy")) for folder in folders]
    names = listed[0]
    if not names:
        raise ValueError(f"items = {folders[0]}: expected a directory of .npy files, found none")
    # Every field's directory holds the same names: a file of one alone would be lost.
    for folder, found in zip(folders[1:], listed[1:]):
        missing = sorted(set(names) - set(found))
        if missing:
            raise ValueError(
                f"{folder}: {missing[:3]} missing: expected the same .npy names as {folders[0]}"
            )
        extra = sorted(set(found) - set(names))
        if extra:
            raise ValueError(
                f"{folder}: {extra[:3]} not in {folders[0]}: expected the same .npy names in "
                "every field's directory (a sequence's file in each)"
            )

    def load(file):
        try:
            return np.load(file, mmap_mode="r")
        except (ValueError, OSError, EOFError) as err:  # NumPy's own errors name no file
            raise ValueError(f"{file}: {err}: expected a .npy file of one sequence") from None

    def items():
        for name in names:
            yield tuple(load(os.path.join(folder, name)) for folder in folders)

    return items(), len(names)


def dataset_rows(dataset, fields, columns):
    """A datasets.Dataset's rows as arrays, read a batch of rows at a time as Arrow (through its
    indices mapping, if any) and sliced from the columns' flat values, never as Python lists."""
    from bload.hf import list_steps  # imported when used: datasets and pyarrow are optional

    columns = tuple(columns) if columns is not None else fields
    if len(columns) != len(fields):
        raise ValueError(f"columns = {columns}: expected one column per field {fields}")
    for batch in dataset.with_format("arrow").iter(batch_size=1024):
        arrays = [batch.column(column).combine_chunks() for column in columns]
        for row in range(batch.num_rows):
            yield tuple(list_steps(array, row, 0, None) for array in arrays)
