"""`python -m bload`: the data commands that need Python's readers (pyarrow, datasets, NumPy).

    python -m bload lengths IN [--column C] [--lengths-format F] [--dtype int64|int32] --out F.npy
    python -m bload store OUT (--npy DIR | --parquet FILE --columns C [C ...]) [--fields ...]
    python -m bload check-store PATH

`lengths` is the Rust `bload lengths` with the Arrow and Parquet readers too (bload's Rust CLI
has no Arrow reader and points here). `store` writes a sequence store (bload.store.write) from a
directory of .npy files (one per sequence; with several fields, one subdirectory per field) or
from list columns of a Parquet or Arrow file. The planning commands (stats, plan, sweep) are the
Rust CLI's, which reads the cache that `lengths` writes.
"""

import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bload", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    lengths = commands.add_parser("lengths", help="write a lengths file's binary cache (.npy)")
    lengths.add_argument("input", metavar="IN", help="text, .npy, .idx, Arrow or Parquet file")
    lengths.add_argument("--column", help="the list column of an Arrow or Parquet file")
    lengths.add_argument(
        "--lengths-format",
        metavar="NAME",
        help="the file's format, one the core lists (bload.lengths.FORMATS); default: its bytes say",
    )
    lengths.add_argument("--dtype", choices=["int64", "int32"], default="int64")
    lengths.add_argument("--out", required=True, metavar="F.npy")
    store = commands.add_parser("store", help="write a sequence store")
    store.add_argument("output", metavar="OUT", help="the store's directory (must not exist)")
    source = store.add_mutually_exclusive_group(required=True)
    source.add_argument("--npy", metavar="DIR", help="a directory of .npy files, one per sequence")
    source.add_argument(
        "--parquet", metavar="FILE", help="a Parquet or Arrow file with list columns"
    )
    store.add_argument("--columns", nargs="+", help="the list columns, one per field (--parquet)")
    store.add_argument(
        "--fields",
        nargs="+",
        default=None,
        help="field names (default: data for --npy; data target for two columns)",
    )
    check = commands.add_parser(
        "check-store", help="verify every field file of a store against its header's CRC-32"
    )
    check.add_argument("store", metavar="PATH", help="the store's directory")
    args = parser.parse_args(argv)

    import bload

    try:
        if args.command == "lengths":
            out = bload.write_lengths_cache(
                args.input,
                args.out,
                format=args.lengths_format,
                column=args.column,
                dtype=args.dtype,
            )
            count = len(bload.read_lengths(out))
            print(f"{out}: {count} lengths from {args.input}, as {args.dtype}")
            return 0
        if args.command == "check-store":
            from bload.sequence_store import _open_layout

            # Every field of the header, as the reader checks it (a StoreError naming the file).
            names = [field["name"] for field in _open_layout(args.store)[1]["fields"]]
            store = bload.SequenceStore(args.store, fields=names, verify=True)
            print(f"{args.store}: every byte of {', '.join(names)} as its header says ({store})")
            return 0
        if args.npy:
            fields = args.fields or ["data"]
            items = args.npy
        else:
            import datasets

            if not args.columns:
                parser.error("--parquet needs --columns")
            fields = args.fields or (["data", "target"] if len(args.columns) == 2 else args.columns)
            loader = (
                datasets.Dataset.from_parquet
                if args.parquet.endswith(".parquet")
                else datasets.Dataset.from_file
            )
            items = loader(args.parquet)
        path = bload.store.write(args.output, items, fields=fields, columns=args.columns)
        print(bload.SequenceStore(path, fields=fields))
        return 0
    except (ValueError, OSError, RuntimeError) as err:
        print(f"python -m bload {args.command}: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
