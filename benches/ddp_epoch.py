"""Epoch time of DDP training with pad_to_max, random_fill and best_fit: the same trainer, model,
data, ranks and sequence steps, only the packing differs. Prints a Markdown table for
BENCHMARKS.md (median of --repeats runs each). Run through `make bench-ddp`, or:

    .venv/bin/python benches/ddp_epoch.py --trainer build/examples/cpp/ddp_trainer --model build/packed_gru.pt
"""

import argparse
import json
import platform
import statistics
import subprocess
import sys

POLICIES = ["pad_to_max", "random_fill", "best_fit"]


def device_name(device):
    if device.startswith("cuda"):
        return subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True
        ).stdout.strip()
    with open("/proc/cpuinfo") as f:
        models = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    return f"{models[0] if models else platform.processor()}, {len(models)} cores"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trainer", required=True)
    parser.add_argument("--model", required=True, help="the TorchScript model; `cpp` is run too")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="")
    args = parser.parse_args()

    extra = ["--device", args.device] if args.device else []
    print(f"`{' '.join(sys.argv)}`\n")
    print("| model | policy | batches per rank | padding | epoch s (median) | runs | loader wait | vs best_fit |")
    print("|---|---|---|---|---|---|---|---|")
    device = None
    for model in ["cpp", args.model]:
        rows = {}
        for policy in POLICIES:
            runs = []
            for _ in range(args.repeats):
                command = [args.trainer, "--world-size", str(args.world_size), "--model", model, "--policy", policy]
                result = subprocess.run(command + extra + ["--json"], capture_output=True, text=True, timeout=600)
                if result.returncode != 0:
                    sys.exit(f"{' '.join(command)} failed:\n{result.stderr}")
                report = json.loads(result.stdout.strip().splitlines()[-1])
                device = report["device"]
                runs.append(report["epochs"][0])
            rows[policy] = runs
        best = statistics.median(run["seconds"] for run in rows["best_fit"])
        for policy, runs in rows.items():
            seconds = statistics.median(run["seconds"] for run in runs)
            epoch = runs[0]
            padding = epoch["padding"] / (epoch["padding"] + epoch["frames"])
            wait = max(run["loader_wait_share"] for run in runs)
            each = ", ".join(f"{run['seconds']:.2f}" for run in runs)
            print(
                f"| {'C++ module' if model == 'cpp' else 'TorchScript'} | {policy} | {epoch['batches_per_rank'][0]} "
                f"| {100 * padding:.2f}% | {seconds:.2f} | {each} "
                f"| {100 * wait:.2f}% | {seconds / best:.2f}x |"
            )
    print(f"\n{args.world_size} ranks on {device}: {device_name(device)}")


if __name__ == "__main__":
    main()
