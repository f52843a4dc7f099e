"""Where bload.store.write writes: the field names it accepts (each its field's file in the store)
and the path it may replace (a store, or an empty directory, never another file)."""

import os
import shutil

# The store's own files, beside its fields' (name + ".bin").
HEADER, OFFSETS = "header.json", "offsets.bin"


def checked_fields(fields):
    """fields= as a tuple of one or more distinct names (as the reader takes them, sequence_store's
    _field_names), each a field file (name + ".bin") that the reader takes (src/store.rs: a plain
    file name in the store) and that is not one of the store's own files: refused before anything
    is written. Besides, '', '.' and '..', whose files ('.bin', '..bin', '...bin') the reader
    would take, are refused as names that read as paths."""
    names = (fields,) if isinstance(fields, str) else fields
    try:
        names = tuple(names)
    except TypeError:
        names = None
    if names is None or not all(isinstance(name, str) for name in names):
        raise TypeError(
            f"fields = {fields!r:.200}: expected a field's name or a tuple of names, e.g. "
            '("data", "target")'
        )
    if not names:
        raise ValueError("fields = (): expected at least one field's name, e.g. 'data'")
    # Compared without case: on a file system that ignores it (macOS's, Windows') "A" and "a"
    # would be one file, each field written over the other.
    folded = [name.casefold() for name in names]
    duplicated = sorted({name for name, key in zip(names, folded) if folded.count(key) > 1})
    if duplicated:
        raise ValueError(
            f"fields = {names!r}: {', '.join(map(repr, duplicated))} more than once (letter case "
            "aside): expected distinct names (each field is a file of the store, read by its name)"
        )
    for name in names:
        file = f"{name}.bin"
        if name in ("", ".", "..") or any(
            separator and separator in name for separator in ("/", os.sep, os.altsep, "\0")
        ):
            why = "is not a file name"
        elif file.casefold() in (HEADER.casefold(), OFFSETS.casefold()):  # one file, case aside
            why = f"would be the store's own {file}"
        else:
            continue
        raise ValueError(
            f"fields = {names!r}: {name!r} {why}: expected names of files in the store "
            f"(its field's file is the name + .bin): not empty, '.' or '..', without '/' or NUL, "
            f"and not {OFFSETS.removesuffix('.bin')!r}"
        )
    return names


def check_replaceable(path):
    """Refuses, before anything is written, a path that overwrite=True must not replace: a file
    or a directory that holds something other than a store (no header.json)."""
    if not os.path.isdir(path):
        raise FileExistsError(
            f"path = {path}: not a directory, not a store: expected a store's directory to replace "
            "(overwrite=True replaces a store, never another file)"
        )
    if os.listdir(path) and not os.path.isfile(os.path.join(path, HEADER)):
        raise FileExistsError(
            f"path = {path}: a directory without {HEADER}, not a store: expected a store's "
            "directory (or an empty one) to replace (overwrite=True replaces a store, never "
            "other files)"
        )


def remove(path):
    """Removes a store moved aside (a directory, or a symbolic link to one), if there is one."""
    if os.path.islink(path):
        os.remove(path)
    elif os.path.lexists(path):
        shutil.rmtree(path)
