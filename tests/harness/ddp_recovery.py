"""Recovery for tests/harness/ddp_trainer.py: rank 0's checkpoints, written whole or not at all (with
every lane's recurrent state, for the lanes policy), the ranks' agreement on where to resume, and the
per-step log. The Python twin of tests/harness/cpp/ddp_trainer/checkpoint.cpp. Which rank was lost
or stalled, the library tells (bload.distributed.Liveness, docs/ddp.md).

What "trained" means: a batch is trained once its gradients' all-reduce (in DDP's backward) has
completed and the optimizer has stepped. A checkpoint written after batch k of an epoch holds
batches 0..k-1 of it, so a run resumed from it trains batches k.. and nothing before. Each rank
logs a batch's pieces before its backward, and no rank completes the all-reduce before every rank
has entered it: every batch a checkpoint holds is in every rank's log. A killed run's lines from
batch k on belong to batches whose training was lost with it, and are to be discarded.
"""

import os

import torch
import torch.distributed as dist
from bload.ops import COLUMN

CHECKPOINT = "checkpoint.pt"
SEQUENCE, OFFSET, LENGTH = COLUMN["sequence"], COLUMN["offset"], COLUMN["length"]


def _flush(path):
    """Flushes a file or a directory (a rename in it) to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(directory, model, optimizer, position, identity, lane_state=None):
    """DIRECTORY/checkpoint.pt: the model's and optimizer's states and the position (the sampler's
    state_dict(), taken after the batches trained: the epoch, the batches and where the plan's
    blocks come from), with the `identity` (lengths and options) it is valid for, and with the
    lanes policy every lane's recurrent state (bload.LaneState.state_dict(), returned in the
    position as "lane_state"). Written to
    checkpoint.pt.partial, flushed, then renamed over the last one: a kill at any point leaves a
    complete checkpoint, the new one or the one before."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, CHECKPOINT)
    partial = path + ".partial"
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "position": dict(position),
        "identity": identity,
    }
    if lane_state is not None:
        state["position"]["lane_state"] = lane_state
    with open(partial, "wb") as file:
        torch.save(state, file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(partial, path)
    _flush(directory)


def load_checkpoint(directory, model, optimizer, identity):
    """Loads DIRECTORY/checkpoint.pt into `model` and `optimizer` and returns its position as a
    bload.BlockSampler state (epoch, position, world_size, planned_world_size, first_block), or
    None where there is none. A checkpoint saved with other lengths or options is a
    RuntimeError naming the first that differs."""
    path = os.path.join(directory, CHECKPOINT)
    if not os.path.exists(path):
        return None
    state = torch.load(path, weights_only=True)
    for name, value in identity.items():
        saved = state["identity"].get(name)
        if saved != value:
            raise RuntimeError(
                f"{path} was saved with {name} = {saved!r}: expected {value!r}, as this run has"
            )
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return state["position"]


def check_resume_points(point, world_size):
    """Every rank resumes at the same (epoch, batches), or none trains: a rank that found no
    checkpoint (a directory not shared between machines) would train other batches in step."""
    points = [None] * world_size
    dist.all_gather_object(points, point)
    if points != [points[0]] * world_size:
        named = ", ".join(
            f"rank {rank} at " + (f"epoch {p[0]} batch {p[1]}" if p else "the beginning")
            for rank, p in enumerate(points)
        )
        raise RuntimeError(
            f"ranks resume at different points: {named} (every rank reads --checkpoint's directory)"
        )


class StepLog:
    """--step-log FILE: rank R appends to FILE.R a line "# run: rank R of W from epoch E batch B"
    per run, then "epoch batch sequence offset length" per piece of each batch it trains, flushed
    before the batch's backward. Does nothing without a FILE."""

    def __init__(self, path, rank, world_size):
        self.file, self.rank, self.world_size = None, rank, world_size
        if path:
            try:
                self.file = open(f"{path}.{rank}", "a")  # noqa: SIM115 (open for the run)
            except OSError as error:
                raise RuntimeError(
                    f"--step-log = {path!r}: cannot append to {path}.{rank}: {error.strerror}"
                ) from error

    def start(self, state, blocks_per_batch):
        """The run's first line: where it starts (a bload.BlockSampler state, or None for the
        beginning). One resumed on another world size adds where the saved plan stood, as its own
        batches count from 0: "(the plan for P ranks from its batch K)"."""
        if self.file:
            state = state or {
                "epoch": 0,
                "position": 0,
                "world_size": self.world_size,
                "planned_world_size": self.world_size,
                "first_block": 0,
            }
            line = f"# run: rank {self.rank} of {self.world_size} from epoch {state['epoch']} batch {state['position']}"
            planned = state["planned_world_size"]
            if planned != state["world_size"] or state["first_block"]:
                line += f" (the plan for {planned} ranks from its batch {state['first_block'] // (planned * blocks_per_batch)})"
            self.file.write(line + "\n")
            self.file.flush()

    def write(self, epoch, batch, table):
        if self.file:
            self.file.writelines(
                f"{epoch} {batch} {row[SEQUENCE]} {row[OFFSET]} {row[LENGTH]}\n"
                for row in table.tolist()
            )
            self.file.flush()  # before the all-reduce: a kill after it cannot take these lines
