"""Data-parallel training of a recurrent model on packed blocks of variable-length sequences: a
user's training program, written with bload's model (bload.nn.PackedGRU), sampler, dataset, lane
state and checkpoint calls.

    python examples/train.py                                  # one process
    torchrun --nproc-per-node 2 examples/train.py             # 2 DDP ranks (gloo, or NCCL on GPUs)
    torchrun --nproc-per-node 2 examples/train.py --policy lanes --t-max 32
    python examples/train.py --model build/packed_gru.pt      # a TorchScript model
    python examples/train.py --checkpoint run.pt              # resumes from run.pt if it exists

The data are made up: sequence i has 16 features per step and, as target, the running sum of its
first feature, so the model must carry its state along a sequence and start each one afresh.
"""

import argparse
import gc
import os

import bload
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

LENGTHS = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "data", "action_genome_like.lengths"
)


class RunningSums(torch.utils.data.Dataset):
    """Sequence i: features [T_i, 16] drawn from seed i, target [T_i, 1] the scaled running sum of
    feature 0. Any map-style dataset of (data [T_i, ...], target [T_i, ...]) works the same."""

    def __init__(self, lengths):
        self.lengths = lengths

    def __len__(self):
        return len(self.lengths)

    def __getitem__(self, i):
        features = torch.randn(self.lengths[i], 16, generator=torch.Generator().manual_seed(i))
        steps = torch.arange(1, self.lengths[i] + 1).unsqueeze(1)
        return features, features[:, :1].cumsum(0) / steps.sqrt()


class LanesStep(torch.nn.Module):
    """The model's forward_lanes as a module's forward, for DistributedDataParallel to wrap."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, data, table, carry, state):
        return self.model.forward_lanes(data, table, carry, state)


def parse():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default=LENGTHS, help="a lengths file (docs/data.md)")
    parser.add_argument("--sequences", type=int, default=2000, help="train on the first N")
    parser.add_argument(
        "--model", default="", help="a TorchScript model file (default: bload.nn.PackedGRU)"
    )
    parser.add_argument("--policy", default="best_fit", choices=bload.POLICIES)
    parser.add_argument("--t-max", type=int, default=94)
    parser.add_argument("--blocks-per-batch", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument(
        "--checkpoint", default="", help="save here after each epoch; resume from it"
    )
    return parser.parse_args()


def main():
    args = parse()
    if "RANK" in os.environ:  # under torchrun
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    device = torch.device(
        f"cuda:{os.environ.get('LOCAL_RANK', 0)}" if torch.cuda.is_available() else "cpu"
    )
    lengths = bload.read_lengths(args.lengths)[: args.sequences].tolist()

    # Every rank plans the same epochs; the first batch of each checks that the ranks agree.
    sampler = bload.BlockSampler(
        lengths, args.t_max, args.blocks_per_batch, policy=args.policy, split=args.policy != "lanes"
    )
    dataset = bload.BlockDataset(RunningSums(lengths), args.t_max)
    loader = DataLoader(
        dataset,
        batch_sampler=sampler,
        collate_fn=bload.collate,
        num_workers=1,
        # A worker started afresh, once: a worker forked from a rank whose process group already
        # runs threads can inherit a lock one of them held, and hang the rank (and so every rank).
        multiprocessing_context="spawn",
        persistent_workers=True,
    )

    torch.manual_seed(0)  # the same initial weights on every rank
    model = torch.jit.load(args.model) if args.model else bload.nn.PackedGRU(16, 64, 1)
    model = model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    lanes = (
        bload.LaneState(sampler, shape=(model.hidden,), device=device)
        if args.policy == "lanes"
        else None
    )

    first_epoch = 0
    if args.checkpoint and os.path.exists(args.checkpoint):
        saved = torch.load(args.checkpoint)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        sampler.load_state_dict(saved["sampler"])  # refuses other lengths or options, by name
        if lanes is not None:
            lanes.load_state_dict(saved["lanes"])
        first_epoch = saved["sampler"]["next_epoch"]

    # DDP averages the gradients of what its module's forward computed; for lanes that is the
    # model's forward_lanes, which goes on from each row's lane state.
    step = LanesStep(model) if args.policy == "lanes" else model
    step = DistributedDataParallel(step) if dist.is_initialized() else step
    for epoch in range(first_epoch, args.epochs):
        sampler.set_epoch(epoch)
        total, steps = 0.0, 0
        for batch in loader:  # every rank gets as many batches, each [blocks_per_batch, t_max, ...]
            batch = batch.to(device)
            if args.policy == "lanes":
                outputs, final = step(batch.data, batch.table, batch.carry, lanes.initial(batch))
                lanes.update(batch, final)  # detached: back-propagation stops at the batch
            else:
                outputs = step(batch.data, batch.table)
            error = (outputs - batch.target)[batch.valid]
            loss = error.pow(2).sum() / max(len(error), 1)  # a batch may hold only padding
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total, steps = total + error.pow(2).sum().item(), steps + len(error)
        stats = sampler.stats()
        if sampler.rank == 0:
            print(
                f"epoch {epoch}: {len(sampler)} batches per rank, mean loss {total / max(steps, 1):.4f}, "
                f"padding {100 * stats['padding'] / (stats['blocks'] * args.t_max):.2f}% of steps"
            )
        state = {"sampler": sampler.state_dict()}
        if lanes is not None:
            state["lanes"] = lanes.state_dict()  # a collective: every rank calls it
        if args.checkpoint and sampler.rank == 0:
            state |= {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
            torch.save(state, args.checkpoint + ".partial")
            os.replace(args.checkpoint + ".partial", args.checkpoint)  # never half a checkpoint
    if dist.is_initialized():
        # DDP holds the process group: freed here, gloo's threads end while the interpreter lives
        # (docs/ddp.md, step 7).
        del step
        gc.collect()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
