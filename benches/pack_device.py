"""pack beside torch.cat on one device (the GPU: `make test-gpu` runs it on cuda), for
BENCHMARKS.md: the same batches, planned from the bundled Action-Genome-shaped lengths, packed by
torch.ops.bload.pack and concatenated by torch.cat of the same pieces (the copy of every real step
without the layout: the floor pack's kernel is held to), and pack_into a reused buffer beside a
copy_ of the batch's bytes. Rounds of CALLS calls alternate; each figure is the median over
ROUNDS rounds of the mean time of a call, timed with the device synchronized.

    python benches/pack_device.py --device cuda
    python benches/pack_device.py --device cpu --quick   # the first batch, one call: that it runs
"""

import argparse
import pathlib
import statistics
import time

import bload
import torch

LENGTHS = (
    pathlib.Path(__file__).resolve().parents[1] / "examples" / "data" / "action_genome_like.lengths"
)


def batch(device, t_max, blocks, features, dtype):
    """A rank's first batch: its table, whole sequences on the device, and their pieces."""
    lengths = bload.read_lengths(LENGTHS)
    sampler = bload.BlockSampler(lengths, t_max, blocks, world_size=1, rank=0, seed=0, split=True)
    first = next(iter(sampler))
    column = bload.ops.COLUMN
    generator = torch.Generator().manual_seed(0)
    sequences, pieces = [], []
    for row in first.table.tolist():
        whole = torch.randn(row[column["sequence_length"]], features, generator=generator).to(
            device, dtype
        )
        sequences.append(whole)
        pieces.append(whole[row[column["offset"]] : row[column["offset"]] + row[column["length"]]])
    return first, sequences, pieces


def side_by_side(work_a, work_b, device, rounds, calls):
    """Median over rounds of the mean microseconds of a call of each, rounds interleaved."""

    def per_call(work):
        torch.cuda.synchronize() if device == "cuda" else None
        start = time.perf_counter()
        for _ in range(calls):
            work()
        torch.cuda.synchronize() if device == "cuda" else None
        return (time.perf_counter() - start) / calls * 1e6

    work_a(), work_b()  # warm the caching allocator and the kernels
    times_a, times_b = [], []
    for _ in range(rounds):
        times_a.append(per_call(work_a))
        times_b.append(per_call(work_b))
    return statistics.median(times_a), statistics.median(times_b)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument(
        "--quick", action="store_true", help="the smallest batch only, one round of one call"
    )
    args = parser.parse_args()
    shapes = [
        (94, 8, 16, torch.float32),
        (512, 8, 256, torch.bfloat16),
        (2048, 16, 1024, torch.bfloat16),
    ]
    if args.quick:
        shapes, args.rounds, args.calls = shapes[:1], 1, 1
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(
        f"pack beside torch.cat on {args.device} ({name}), torch {torch.__version__}; median of "
        f"{args.rounds} rounds of {args.calls} calls"
    )
    print(
        f"{'batch':<34} {'pack us':>9} {'torch.cat us':>13} {'ratio':>6}   {'pack_into us':>12} {'copy_ us':>9} {'ratio':>6}"
    )
    for t_max, blocks, features, dtype in shapes:
        print(row(args, t_max, blocks, features, dtype))


def row(args, t_max, blocks, features, dtype):
    """One batch's line: pack beside torch.cat, pack_into beside copy_."""
    first, sequences, pieces = batch(args.device, t_max, blocks, features, dtype)
    table = first.table
    pack_us, cat_us = side_by_side(
        lambda: bload.ops.pack(sequences, table, blocks, t_max, 0.0),
        lambda: torch.cat(pieces),
        args.device,
        args.rounds,
        args.calls,
    )
    out = bload.ops.pack(sequences, table, blocks, t_max, 0.0)
    source, destination = out.clone(), torch.empty_like(out)
    into_us, copy_us = side_by_side(
        lambda: bload.ops.pack(sequences, table, blocks, t_max, 0.0, out=out),
        lambda: destination.copy_(source),
        args.device,
        args.rounds,
        args.calls,
    )
    label = f"{blocks}x{t_max}x{features} {str(dtype)[6:]}, {len(table)} pieces"
    return (
        f"{label:<34} {pack_us:9.1f} {cat_us:13.1f} {pack_us / cat_us:5.2f}x   "
        f"{into_us:12.1f} {copy_us:9.1f} {into_us / copy_us:5.2f}x"
    )


if __name__ == "__main__":
    main()
