"""Epoch time of DDP training with pad_to_max, random_fill and best_fit: the same trainer, model,
data, ranks and sequence steps, only the packing differs. Then lanes on long sequences, against
best_fit and against a loader that pads each batch to its longest sequence, each with the same
optimizer steps per epoch (so the same sequences per step, on average). Prints Markdown tables for
BENCHMARKS.md (median of --repeats rounds, each running every row once). Run through
`make bench-ddp`, or:

    .venv/bin/python benches/ddp_epoch.py --trainer build/tests/harness/cpp/ddp_trainer --model build/packed_gru.pt

With --figure FILE.svg it also draws the C++ module's padding and epoch time per policy (the
README's figure, docs/padding_and_epoch_time.svg).
"""

import argparse
import json
import platform
import statistics
import subprocess
import sys

import bload

POLICIES = ["pad_to_max", "random_fill", "best_fit"]


def device_name(device):
    if device.startswith("cuda"):
        return subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        ).stdout.strip()
    with open("/proc/cpuinfo") as f:
        models = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    return f"{models[0] if models else platform.processor()}, {len(models)} cores"


def epoch_run(command):
    """The trainer's JSON report of one run of `command`: its first epoch, and the device."""
    result = subprocess.run(command + ["--json"], capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{result.stderr}")
    report = json.loads(result.stdout.strip().splitlines()[-1])
    return report["epochs"][0], report["device"]


def alternating_runs(commands, repeats):
    """Each of `commands` (a dict) run once a round, `repeats` rounds, so that a change in the
    machine's load during the bench falls on every command alike: their first epochs, and the
    device."""
    runs, device = {key: [] for key in commands}, None
    for _ in range(repeats):
        for key, command in commands.items():
            epoch, device = epoch_run(command)
            runs[key].append(epoch)
    return runs, device


def load_average():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def closest_rows(lengths, t_max, world_size, batches):
    """The blocks per batch whose best_fit plan has the batch count nearest `batches`."""

    def count(rows):
        return len(bload.BlockSampler(lengths, t_max, rows, world_size=world_size, rank=0))

    rows = 1  # more rows, fewer batches: the first that reaches `batches`, or the one before
    while count(rows) > batches:
        rows += 1
    return rows - 1 if rows > 1 and count(rows - 1) - batches < batches - count(rows) else rows


def lanes_table(args, extra):
    """Lanes against best_fit (whole sequences, t_max the longest) and against the padded loader
    (each batch padded to its longest), on --lanes-sequences long sequences, the C++ model."""
    with open(args.lanes_lengths) as f:
        lengths = [int(line) for line in f if line.strip()][: args.lanes_sequences]
    world = args.world_size
    lanes = bload.BlockSampler(
        lengths, args.lanes_t_max, args.lanes_rows, world_size=world, rank=0, policy="lanes"
    )
    batches = len(lanes)  # optimizer steps per epoch, which the others match
    longest = max(lengths)
    loops = [
        ("bload", "lanes", args.lanes_t_max, args.lanes_rows),
        ("bload", "best_fit", longest, closest_rows(lengths, longest, world, batches)),
        ("padded", "-", "longest of each batch", max(1, round(len(lengths) / (world * batches)))),
    ]
    base = [
        args.trainer,
        "--world-size",
        str(world),
        "--model",
        "cpp",
        "--lengths",
        args.lanes_lengths,
        "--sequences",
        str(len(lengths)),
    ]
    print(
        f"\n{len(lengths)} sequences of {args.lanes_lengths} ({sum(lengths)} steps, longest {longest}), the C++ module:\n"
    )
    print(
        "| loader | t_max | rows | optimizer steps | sequences per step | real steps | steps in all | sequential steps | epoch s (median) | runs | vs lanes |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    commands = {}
    for loop, policy, t_max, per_batch in loops:
        command = base + ["--loop", loop, "--blocks-per-batch", str(per_batch)]
        if loop == "bload":
            command += ["--policy", policy, "--t-max", str(t_max)]
        commands[(loop, policy, t_max, per_batch)] = command + extra
    runs_of, device = alternating_runs(commands, args.repeats)
    rows = [key + (runs,) for key, runs in runs_of.items()]
    lanes_seconds = statistics.median(run["seconds"] for run in rows[0][4])
    for loop, policy, t_max, per_batch, runs in rows:
        epoch, seconds = runs[0], statistics.median(run["seconds"] for run in runs)
        steps = epoch["frames"] + epoch["padding"]
        optimizer_steps = epoch["batches_per_rank"][0]
        each = ", ".join(f"{run['seconds']:.2f}" for run in runs)
        print(
            f"| {policy if loop == 'bload' else 'padded to each batch'} | {t_max} | {per_batch} | {optimizer_steps} "
            f"| {len(lengths) / (world * optimizer_steps):.1f} | {100 * epoch['frames'] / steps:.2f}% | {steps} "
            f"| {epoch['sequential_steps']} | {seconds:.2f} | {each} "
            f"| {seconds / lanes_seconds:.2f}x |"
        )
    return device


def draw_figure(path, rows):
    """Two bar charts side by side, one bar per policy: the share of steps that are padding, and
    the median epoch time relative to best_fit's. `rows` is [(policy, padding share, seconds)]."""
    best = dict((policy, seconds) for policy, _, seconds in rows)["best_fit"]
    panels = [
        (
            "padding, % of steps",
            [(policy, 100 * share, f"{100 * share:.1f}%") for policy, share, _ in rows],
        ),
        (
            "epoch time, x best_fit",
            [(policy, s / best, f"{s / best:.2f}x ({s:.2f} s)") for policy, _, s in rows],
        ),
    ]
    width, bar, gap, left = 380, 22, 14, 90
    height = 40 + len(rows) * (bar + gap)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * width}" height="{height + 30}" font-family="sans-serif" font-size="12">'
    ]
    for index, (title, values) in enumerate(panels):
        x0, top = index * width + left, 30
        largest = max(value for _, value, _ in values)
        parts.append(f'<text x="{x0}" y="18" font-weight="bold">{title}</text>')
        for row, (policy, value, label) in enumerate(values):
            y = top + row * (bar + gap)
            length = (width - left - 130) * value / largest
            colour = "#2b7bb9" if policy == "best_fit" else "#bbbbbb"
            parts.append(f'<text x="{x0 - 6}" y="{y + bar - 7}" text-anchor="end">{policy}</text>')
            parts.append(
                f'<rect x="{x0}" y="{y}" width="{length:.1f}" height="{bar}" fill="{colour}"/>'
            )
            parts.append(f'<text x="{x0 + length + 4:.1f}" y="{y + bar - 7}">{label}</text>')
    parts.append(
        f'<text x="10" y="{height + 20}" fill="#555">2 gloo ranks on CPU, one epoch of the Action-Genome-shaped lengths, t_max 94, the same model and data; median of runs (make bench-ddp)</text>'
    )
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trainer", required=True)
    parser.add_argument("--model", required=True, help="the TorchScript model; `cpp` is run too")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="")
    parser.add_argument(
        "--lanes-lengths",
        default="examples/data/speech_like.lengths",
        help="the long sequences of the lanes table",
    )
    parser.add_argument("--lanes-sequences", type=int, default=400)
    parser.add_argument("--lanes-rows", type=int, default=16, help="lanes per rank")
    parser.add_argument("--lanes-t-max", type=int, default=512)
    parser.add_argument(
        "--figure", help="draw the C++ module's padding and epoch time per policy to this SVG file"
    )
    parser.add_argument("--no-lanes", action="store_true", help="skip the lanes table")
    parser.add_argument(
        "--policies",
        default=",".join(POLICIES),
        help="the policies of the first table, comma-separated (best_fit among them)",
    )
    parser.add_argument(
        "--sequences", type=int, help="the first table on the first N sequences only"
    )
    args = parser.parse_args()
    policies = args.policies.split(",")
    if "best_fit" not in policies or not set(policies) <= set(POLICIES):
        parser.error(
            f"--policies {args.policies}: expected some of {', '.join(POLICIES)}, best_fit among them"
        )

    extra = ["--device", args.device] if args.device else []
    first_table = extra + (["--sequences", str(args.sequences)] if args.sequences else [])
    print(f"`{' '.join(sys.argv)}`\n")
    print(f"load average at the start: {load_average()}\n")
    print(
        "| model | policy | batches per rank | padding | steps vs best_fit | epoch s (median) | runs | loader wait | vs best_fit |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    figure_rows = []
    # Every model and policy in each round, rounds alternating: the ratios compare runs made at
    # the same moments.
    commands = {
        (model, policy): [args.trainer, "--world-size", str(args.world_size), "--model", model]
        + ["--policy", policy]
        + first_table
        for model in ["cpp", args.model]
        for policy in policies
    }
    runs_of, device = alternating_runs(commands, args.repeats)
    for model in ["cpp", args.model]:
        best_runs = runs_of[(model, "best_fit")]
        best = statistics.median(run["seconds"] for run in best_runs)
        best_steps = best_runs[0]["padding"] + best_runs[0]["frames"]
        for policy in policies:
            runs = runs_of[(model, policy)]
            seconds = statistics.median(run["seconds"] for run in runs)
            epoch = runs[0]
            steps = epoch["padding"] + epoch["frames"]
            padding = epoch["padding"] / steps
            wait = max(run["loader_wait_share"] for run in runs)
            each = ", ".join(f"{run['seconds']:.2f}" for run in runs)
            print(
                f"| {'C++ module' if model == 'cpp' else 'TorchScript'} | {policy} | {epoch['batches_per_rank'][0]} "
                f"| {100 * padding:.2f}% | {steps / best_steps:.2f}x | {seconds:.2f} | {each} "
                f"| {100 * wait:.2f}% | {seconds / best:.2f}x |"
            )
            if model == "cpp":
                figure_rows.append((policy, padding, seconds))
    print(f"\nload average at the end: {load_average()}")
    if args.figure:
        draw_figure(args.figure, figure_rows)
    if not args.no_lanes:
        lanes_table(args, extra)
    print(f"\n{args.world_size} ranks on {device}: {device_name(device)}")


if __name__ == "__main__":
    main()
