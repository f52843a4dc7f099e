"""Lengths of a generated Parquet list column (10M rows by default), read by bload.read_lengths
from the column's offsets, beside what users write without it: a plain loop over the column's
rows, and datasets' map(len) (on a subset, its time per row scaled to all rows, since at its
rate the whole column takes minutes). All on the same file, in one run; a timing, not a test
(BENCHMARKS.md records the command and its output).

    python benches/lengths_formats.py [--rows 10000000] [--map-rows 200000] [--dir DIR]
"""

import argparse
import os
import tempfile
import time

import bload
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def generate(path, rows, seed=0):
    """rows token sequences of 1 to 16 int32 tokens (vocabulary 50,000), written a slice at a
    time so that the values never all sit in memory."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 17, rows).astype(np.int32)
    schema = pa.schema([("input_ids", pa.list_(pa.int32()))])
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, rows, 1_000_000):
            part = lengths[start : start + 1_000_000]
            offsets = np.concatenate([[0], np.cumsum(part)]).astype(np.int32)
            values = rng.integers(0, 50_000, int(offsets[-1])).astype(np.int32)
            column = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
            writer.write_table(pa.table({"input_ids": column}, schema=schema))
    return lengths


def timed(label, function, rows, scale=1.0, runs=1):
    """Runs `function` `runs` times and prints the median time (each run's too when several)."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        result = function()
        times.append((time.perf_counter() - start) * scale)
    seconds = sorted(times)[len(times) // 2]
    note = f" (measured on {rows / scale:,.0f} rows, scaled)" if scale != 1.0 else ""
    if runs > 1:
        note += f" (median of {', '.join(f'{t:.3f}' for t in times)})"
    print(f"  {label:<48} {seconds:8.3f} s  {rows / seconds / 1e6:8.2f} M rows/s{note}")
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--map-rows", type=int, default=200_000)
    parser.add_argument(
        "--dir", default=None, help="where to write the file (default: a temporary dir)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        path = os.path.join(directory, "tokens.parquet")
        start = time.perf_counter()
        expected = generate(path, args.rows)
        print(
            f"{args.rows:,} rows, {int(expected.sum()):,} int32 tokens, {os.path.getsize(path) / 2**20:.0f} MiB "
            f"of Parquet (written in {time.perf_counter() - start:.1f} s); lengths of column input_ids:"
        )

        lengths = timed(
            "bload.read_lengths(path, column=...)",
            lambda: bload.read_lengths(path, column="input_ids"),
            args.rows,
            runs=3,
        )
        assert np.array_equal(lengths.numpy(), expected)

        def plain_loop():
            out = []
            for batch in pq.ParquetFile(path).iter_batches(
                columns=["input_ids"], batch_size=65_536
            ):
                out.extend(len(row) for row in batch.column(0).to_pylist())
            return out

        assert np.array_equal(
            timed("plain loop over the rows (to_pylist, len)", plain_loop, args.rows), expected
        )

        import datasets

        datasets.disable_progress_bars()
        cache = os.path.join(directory, "hf")
        ds = timed(
            "datasets.Dataset.from_parquet (its Arrow cache)",
            lambda: datasets.Dataset.from_parquet(path, cache_dir=cache),
            args.rows,
        )
        lengths = timed(
            "bload.read_lengths(dataset, column=...)",
            lambda: bload.read_lengths(ds, column="input_ids"),
            args.rows,
            runs=3,
        )
        assert np.array_equal(lengths.numpy(), expected)
        subset = ds.select(range(min(args.map_rows, args.rows)))
        mapped = timed(
            "datasets map(len) over the rows",
            lambda: subset.map(lambda row: {"length": len(row["input_ids"])}, keep_in_memory=True),
            args.rows,
            scale=args.rows / len(subset),
        )
        assert np.array_equal(np.asarray(mapped["length"]), expected[: len(subset)])


if __name__ == "__main__":
    main()
