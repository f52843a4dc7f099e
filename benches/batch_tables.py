"""The batch_tables operator (every table of a packed batch from its block table, the call a loader
makes per batch), timed on the batches of a real plan, for two builds of libbload.so side by side:
each round runs in a process of its own per library (a library loads once per process), the
rounds alternate, and the figures are medians.

    .venv/bin/python benches/batch_tables.py BEFORE.so AFTER.so

Prints microseconds per call for each library and their ratio (after / before).
"""

import os
import statistics
import subprocess
import sys

ROUNDS, CALLS = 7, 2000
SEQUENCES, T_MAX, BLOCKS = 20_000, 512, 8

# Without `import bload`: the package follows its own library, and `before` may be older.
ONE_ROUND = f"""
import os, time, torch
torch.ops.load_library(os.environ["BLOAD_LIBRARY"])
torch.set_num_threads(1)
generator = torch.Generator().manual_seed(0)
lengths = (torch.randn({SEQUENCES}, generator=generator) * 0.8 + 4.5).exp().clamp(1, {T_MAX})
planner = torch.classes.bload.Planner(lengths.long(), {T_MAX}, {BLOCKS})
tables = [planner.batch(0, 0, index) for index in range(64)]
for table in tables:
    torch.ops.bload.batch_tables(table, {BLOCKS}, {T_MAX})
start = time.perf_counter()
for call in range({CALLS}):
    torch.ops.bload.batch_tables(tables[call % 64], {BLOCKS}, {T_MAX})
print((time.perf_counter() - start) / {CALLS} * 1e6)
"""


def one_round(library):
    env = dict(os.environ, BLOAD_LIBRARY=library, OMP_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, "-c", ONE_ROUND], env=env, capture_output=True, text=True, check=True
    )
    return float(out.stdout.split()[-1])


def main(before, after):
    times = {before: [], after: []}
    for _ in range(ROUNDS):
        for library in (before, after):
            times[library].append(one_round(library))
    medians = {library: statistics.median(values) for library, values in times.items()}
    print(f"batch_tables, {BLOCKS} blocks of {T_MAX} steps, median of {ROUNDS} alternating rounds")
    for name, library in (("before", before), ("after", after)):
        print(f"{name:>6}: {medians[library]:8.2f} us a call  ({library})")
    print(f" ratio: {medians[after] / medians[before]:.3f} (after / before)")


if __name__ == "__main__":
    main(*sys.argv[1:3])
