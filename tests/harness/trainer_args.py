"""The command line of tests/harness/ddp_trainer.py: its options and the checks between them."""

import argparse
import os

import bload
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def at_least(minimum):
    """An argparse type: an integer of at least `minimum` (argparse names the flag)."""

    def integer(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r}: expected an integer of at least {minimum}")
        return value

    return integer


def seconds_at_least(minimum):
    """An argparse type: a number of seconds of at least `minimum`."""

    def number(text):
        try:
            value = float(text)
        except ValueError:
            value = None
        if value is None or not minimum <= value < 1e9:
            raise argparse.ArgumentTypeError(
                f"{text!r}: expected a number of seconds of at least {minimum}"
            )
        return value

    return number


def parse():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--world-size",
        type=at_least(1),
        help="ranks to start (default 2; under torchrun, WORLD_SIZE)",
    )
    parser.add_argument(
        "--lengths", default=os.path.join(ROOT, "examples", "data", "action_genome_like.lengths")
    )
    parser.add_argument("--sequences", type=at_least(1), help="use only the first N sequences")
    parser.add_argument(
        "--store",
        default="",
        help="read the sequences from the sequence store at DIR, written "
        "there first from the generated ones when DIR does not exist (docs/data.md)",
    )
    parser.add_argument(
        "--model",
        default="gru",
        help="gru (bload.nn.PackedGRU, scripted here; the default), transformer (tests/support's "
        "causal transformer, eager: see --attention), or a saved TorchScript model file",
    )
    parser.add_argument(
        "--attention",
        choices=["flex", "sdpa"],
        help="the eager transformer's attention: flex_attention with the batch's BlockMask "
        "(default on CUDA; it has no backward on the CPU) or SDPA with bload's dense mask "
        "(default on the CPU)",
    )
    parser.add_argument(
        "--policy",
        default="best_fit",
        choices=bload.POLICIES,
        help="lanes: each row carries the model's state from batch to batch (truncated "
        "back-propagation: detached at batch boundaries)",
    )
    parser.add_argument("--t-max", type=at_least(1), default=94)
    parser.add_argument("--blocks-per-batch", type=at_least(1), default=8)
    parser.add_argument("--epochs", type=at_least(1), default=1)
    parser.add_argument("--seed", type=at_least(0), default=0)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument(
        "--workers",
        type=at_least(0),
        default=0,
        help="DataLoader worker processes per rank (0: load in the rank)",
    )
    parser.add_argument(
        "--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu"
    )
    parser.add_argument(
        "--timeout", type=at_least(1), default=300, help="seconds a collective may wait"
    )
    parser.add_argument(
        "--heartbeat-window",
        type=seconds_at_least(0.1),
        default=30.0,
        help="seconds after which a rank silent (stopped) or stuck behind the others is named by "
        "every rank, which then stop (default 30; docs/ddp.md)",
    )
    parser.add_argument(
        "--json", action="store_true", help="rank 0 ends with one JSON line of figures"
    )
    parser.add_argument(
        "--checkpoint",
        default="",
        help="where rank 0 keeps the last checkpoint, DIR/checkpoint.pt "
        "(every rank reads it to resume: on several machines, a shared directory)",
    )
    parser.add_argument(
        "--checkpoint-every",
        type=at_least(0),
        default=0,
        help="write it after every N batches of an epoch",
    )
    parser.add_argument(
        "--resume", action="store_true", help="start from the checkpoint where there is one"
    )
    parser.add_argument(
        "--step-log",
        default="",
        help='rank R appends to FILE.R a line per piece it trains: "epoch '
        'batch sequence offset length", after a "# run" line per run',
    )
    args = parser.parse_args()
    if args.attention is None:
        args.attention = "flex" if args.device == "cuda" else "sdpa"
    if args.model == "transformer" and args.policy == "lanes":
        parser.error(
            "--policy = 'lanes' with --model = 'transformer': expected a recurrent model; "
            "attention carries no state from batch to batch"
        )
    if args.attention == "flex" and args.device == "cpu" and args.model == "transformer":
        parser.error(
            "--attention = 'flex' on the CPU: flex_attention has no CPU backward; use sdpa"
        )
    if not args.checkpoint and (args.checkpoint_every or args.resume):
        parser.error("--checkpoint = '': expected a directory with --checkpoint-every or --resume")
    if "RANK" in os.environ:  # torchrun's: it says the world size
        world_size = os.environ.get("WORLD_SIZE", "")
        if args.world_size is not None and str(args.world_size) != world_size:
            parser.error(
                f"--world-size = {args.world_size}: expected WORLD_SIZE = {world_size!r} under torchrun (or no --world-size)"
            )
    elif args.world_size is None:
        args.world_size = 2
    return args
