"""What SequenceStore(verify=True) costs: every field file's CRC-32 read from the page cache,
beside a plain read of the same bytes and beside opening the store without it, for BENCHMARKS.md.

    .venv/bin/python benches/store_verify.py     # (make bench runs it)

A store of SEQUENCES sequences (lengths 50 to 549) of 64 float32 features and an int64 target
per step (about 75 MiB of fields), written once; rounds alternate the three, timed warm, and
the figures are medians over ROUNDS rounds.
"""

import statistics
import tempfile
import time

import bload
import numpy as np

SEQUENCES, FEATURES, ROUNDS = 1000, 64, 7


def items():
    rng = np.random.default_rng(0)
    for index in range(SEQUENCES):
        steps = 50 + index % 500
        yield rng.standard_normal((steps, FEATURES), dtype=np.float32), np.arange(steps)


def read_all(store):
    for field in store.fields:
        with open(field["path"], "rb") as file:
            while file.read(1 << 20):
                pass


def main():
    with tempfile.TemporaryDirectory() as directory:
        path = bload.store.write(f"{directory}/s", items(), total=SEQUENCES, progress=False)
        store = bload.SequenceStore(path)
        megabytes = sum(field["bytes"] for field in store.fields) / 2**20
        timings = {"open": [], "read every byte": [], "open with verify=True": []}
        read_all(store)  # warm the page cache
        for _ in range(ROUNDS):
            for name, run in (
                ("open", lambda: bload.SequenceStore(path)),
                ("read every byte", lambda: read_all(store)),
                ("open with verify=True", lambda: bload.SequenceStore(path, verify=True)),
            ):
                start = time.perf_counter()
                run()
                timings[name].append(time.perf_counter() - start)
        print(f"store of {SEQUENCES} sequences, {megabytes:.0f} MiB of fields, page cache warm")
        read = statistics.median(timings["read every byte"])
        for name, values in timings.items():
            median = statistics.median(values)
            print(
                f"{name:24} {median * 1e3:8.1f} ms  {megabytes / median:8.0f} MiB/s  "
                f"{median / read:5.2f}x a plain read"
            )


if __name__ == "__main__":
    main()
