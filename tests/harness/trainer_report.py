"""What tests/harness/ddp_trainer.py reports: rank 0's progress line, each rank's figures of an
epoch, and rank 0's summary of every rank's (a line per epoch, and with --json one JSON line)."""

import dataclasses
import json
import math
import sys
import time


class Progress:
    """Rank 0's progress line: redrawn in place on a terminal, a line per tenth otherwise."""

    def __init__(self, shown, total):
        self.shown, self.total, self.tty, self.drawn = shown, total, sys.stdout.isatty(), 0.0

    def update(self, batch, loss, elapsed, frames):
        last = batch == self.total
        if not self.shown:
            return
        if self.tty and not last and time.monotonic() - self.drawn < 0.1:
            return
        if not self.tty and not last and batch * 10 // self.total == (batch - 1) * 10 // self.total:
            return
        self.drawn = time.monotonic()
        line = f"batch {batch}/{self.total}  loss {loss:.4f}  {batch / elapsed:.1f} steps/s  {frames / elapsed:.0f} frames/s"
        print(
            ("\r" + line) if self.tty else line,
            end="\n" if last or not self.tty else "",
            flush=True,
        )


@dataclasses.dataclass
class EpochFigures:
    """One rank's figures of one epoch."""

    epoch: int
    first_batch: int  # where this run started in the epoch: 0, or a checkpoint's position
    seconds: float  # the epoch
    first_wait: float  # the wait for its first batch (which also starts the loader's workers)
    wait_share: float  # the share of the rest of the epoch spent waiting for the loader
    batches: int
    frames: int  # steps of sequences
    padding: int  # steps of padding
    first_loss: float  # mean loss of the epoch's first tenth
    last_loss: float  # and of its last tenth


def ends_of(losses):
    """Mean loss of the first and last tenth."""
    tenth = max(len(losses) // 10, 1)
    return sum(losses[:tenth]) / tenth, sum(losses[-tenth:]) / tenth


def finite(value):
    """`value` (dicts and lists of numbers) with every NaN or infinity as None: JSON has neither."""
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [finite(item) for item in value]
    return None if isinstance(value, float) and not math.isfinite(value) else value


def report(args, world_size, device, gathered):
    """Rank 0's summary of every rank's figures (`gathered`, as dicts): a line per epoch this run
    trained, and with --json one JSON line. False where the ranks ran different batch counts."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    summary = {
        "model": args.model or "scripted",
        "policy": args.policy,
        "backend": backend,
        "device": str(device),
        "world_size": world_size,
        "epochs": [],
    }
    equal = True
    for epoch in range(len(gathered[0])):
        ranks = [EpochFigures(**rank_epochs[epoch]) for rank_epochs in gathered]
        per_rank = [figures.batches for figures in ranks]
        equal = equal and per_rank == [per_rank[0]] * world_size
        seconds = max(figures.seconds for figures in ranks)
        waited = max(figures.wait_share for figures in ranks)
        first_wait = max(figures.first_wait for figures in ranks)
        frames, padding = (
            sum(figures.frames for figures in ranks),
            sum(figures.padding for figures in ranks),
        )
        first = sum(figures.first_loss for figures in ranks) / world_size
        last = sum(figures.last_loss for figures in ranks) / world_size
        number, first_batch = ranks[0].epoch, ranks[0].first_batch
        print(
            f"epoch {number}{f' from batch {first_batch}' if first_batch else ''}: {seconds:.2f} s on {world_size} ranks "
            f"({backend}, {args.policy}), batches per rank {per_rank}{' (equal)' if equal else ' (NOT EQUAL)'}, padding "
            f"{100 * padding / max(frames + padding, 1):.2f}% of steps, first batch after {first_wait:.2f} s, then "
            f"loader wait {100 * waited:.2f}% of the steps, loss {first:.4f} -> {last:.4f}"
        )
        summary["epochs"].append(
            {
                "epoch": number,
                "first_batch": first_batch,
                "seconds": seconds,
                "first_batch_seconds": first_wait,
                "loader_wait_share": waited,
                "batches_per_rank": per_rank,
                "frames": frames,
                "padding": padding,
                "first_loss": first,
                "last_loss": last,
            }
        )
    if args.json:
        print(json.dumps(finite(summary), allow_nan=False), flush=True)
    return equal
