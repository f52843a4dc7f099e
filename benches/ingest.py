"""Python's ingestion of 10M lengths against the Rust constructor, side by side, for BENCHMARKS.md.

    make bench        # or, with the package installed: .venv/bin/python benches/ingest.py

The baseline is `Planner::new` in Rust (`BLOAD_BENCH_ONLY=ingest cargo bench --bench plan`) on
the same lengths, written to a lengths file: the checks and per-length tables every planner
builds. What Python adds on top is getting the lengths across: a tensor or numpy array is read
in place, and the core copies it into its own 32 bits a sequence in that same pass
(`Planner::from_lengths`), into fresh memory. The Rust row's lengths are copied, and their pages
touched, outside the timing; the bench also prints, beside it, `from_lengths` of the same values
as i64 and i32 and `Planner::new` of a copy made inside the clock. Every row is the median of 7
rounds.
"""

import math
import os
import pickle
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bload
import torch

ROOT = Path(__file__).resolve().parent.parent
SEQUENCES, T_MAX, ROUNDS = 10_000_000, 2048, 7


def median_s(work):
    """The median wall time of `work()` over ROUNDS rounds. The previous result is freed before
    the clock starts, so no round pays for freeing the one before."""
    seconds, out = [], None
    for _ in range(ROUNDS):
        out = None
        start = time.perf_counter()
        out = work()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), out


def rust_planner_new_s(path):
    """The Rust constructor's median on the lengths file, from the bench's machine-readable line."""
    env = dict(
        os.environ,
        BLOAD_BENCH_ONLY="ingest",
        BLOAD_BENCH_LENGTHS=str(path),
        BLOAD_BENCH_T_MAX=str(T_MAX),
    )
    run = subprocess.run(
        ["cargo", "bench", "--locked", "--bench", "plan"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    match = re.search(r"^planner_new_median_s (\S+)$", run.stdout, re.MULTILINE)
    if match is None:
        sys.exit(f"no planner_new_median_s line in the bench's output:\n{run.stdout}{run.stderr}")
    print(run.stdout.strip())
    return float(match.group(1))


class _SamplerUnplanned(bload.BlockSampler):
    """BlockSampler's constructor without its last step, planning epoch 0 (seconds at 10M,
    not ingestion): argument checks, the array as a tensor, the planner."""

    def _start(self, epoch):
        pass


def main():
    torch.set_num_threads(1)  # the Rust bench is single-threaded, so is everything timed here
    # Lognormal lengths of median 200 (exp of the mean of the log), seeded, clamped to 1..t_max.
    generator = torch.Generator().manual_seed(0)
    draws = torch.empty(SEQUENCES, dtype=torch.float64).log_normal_(
        math.log(200.0), 1.0, generator=generator
    )
    lengths64 = draws.round().clamp_(1, T_MAX).to(torch.int64)
    lengths32 = lengths64.to(torch.int32)  # made outside the timing: a caller's own tensor
    array32 = lengths32.numpy()

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lognormal_10M.lengths"
        path.write_text("\n".join(map(str, lengths64.tolist())) + "\n")
        rust_s = rust_planner_new_s(path)

    Planner = torch.classes.bload.Planner
    rows = [("Rust Planner::new (cargo bench)", rust_s)]
    rows.append(("Planner(int64 tensor)", median_s(lambda: Planner(lengths64, T_MAX))[0]))
    rows.append(("Planner(int32 tensor)", median_s(lambda: Planner(lengths32, T_MAX))[0]))
    make = lambda: _SamplerUnplanned(array32, T_MAX, world_size=1, rank=0)  # noqa: E731
    rows.append(("BlockSampler(numpy int32), no plan", median_s(make)[0]))
    # As a user calls it: the constructor also plans epoch 0, hence far above the baseline.
    whole_s, sampler = median_s(lambda: bload.BlockSampler(array32, T_MAX, world_size=1, rank=0))
    rows.append(("BlockSampler(numpy int32) + plan", whole_s))
    dumps_s, pickled = median_s(lambda: pickle.dumps(sampler))
    rows.append(("pickle.dumps(sampler)", dumps_s))

    print(
        f"\n{SEQUENCES:,} lognormal lengths (median 200, 1..{T_MAX}), t_max {T_MAX}, "
        f"median of {ROUNDS} rounds, torch {torch.__version__}, 1 thread"
    )
    print(f"{'what':<36} {'median ms':>10} {'x Rust':>7}")
    for what, seconds in rows:
        print(f"{what:<36} {seconds * 1e3:>10.2f} {seconds / rust_s:>7.2f}")
    print(
        f"pickle.dumps(sampler): {len(pickled):,} bytes, "
        f"{len(pickled) / SEQUENCES:.2f} bytes per sequence"
    )
    env = " ".join(
        f"{name}={shlex.quote(os.environ[name])}"
        for name in ("PYTHONPATH", "BLOAD_LIBRARY")
        if name in os.environ
    )
    print(f"command: {env} {shlex.join([os.path.relpath(sys.executable, ROOT), *sys.argv])}")


if __name__ == "__main__":
    main()
