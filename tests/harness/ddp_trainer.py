"""Data-parallel training of tests/support's models on packed blocks (bload.nn.PackedGRU
scripted, the eager causal transformer with flex_attention or SDPA, or a TorchScript file), with
torch.distributed (gloo on CPU, NCCL on CUDA) and DistributedDataParallel: the Python twin of
tests/harness/cpp/ddp_trainer/. Run from the repository root after `make` (which installs the
bload package into .venv):

    PYTHONPATH=tests/support .venv/bin/python tests/harness/ddp_trainer.py --world-size 2 \
        [--model transformer]

It starts one process per rank itself; under torchrun (RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT set; LOCAL_RANK picks the GPU) it runs the rank it is given instead, on one machine or
several:

    PYTHONPATH=tests/support torchrun --nnodes N --node-rank I --nproc-per-node P
        --rdzv-endpoint HOST:PORT --rdzv-backend c10d tests/harness/ddp_trainer.py
        (one command line, on each machine I)
"""

import dataclasses
import datetime
import faulthandler
import gc
import os
import socket
import sys
import time
import zlib

import bload
import torch
import torch.distributed as dist
from ddp_recovery import StepLog, check_resume_points, load_checkpoint, save_checkpoint
from torch.nn.parallel import DistributedDataParallel
from trainer_args import parse
from trainer_report import EpochFigures, Progress, ends_of, report

# tests/support (the test models and data set) comes on PYTHONPATH: the tests set it, as above.
try:
    import models
    from packed_transformer import with_block_mask, with_mask
    from rank_exit import exit_without_teardown
    from running_sum import RunningSum
except ModuleNotFoundError as error:
    if error.name not in ("models", "packed_transformer", "rank_exit", "running_sum"):
        raise
    sys.exit(
        f"{sys.argv[0]}: no module {error.name!r}: tests/support must be on PYTHONPATH "
        "(PYTHONPATH=tests/support from the repository root)"
    )


def lengths_of(args):
    lengths = (
        bload.SequenceStore(args.store).lengths if args.store else bload.read_lengths(args.lengths)
    ).tolist()
    return lengths[: args.sequences] if args.sequences else lengths


def make_sampler(lengths, args, world_size, rank):
    """The plan every rank makes: the starting process makes it too, so that what every rank would
    refuse (a t_max too small, more blocks than pieces) is said once, before any rank starts."""
    return bload.BlockSampler(
        lengths,
        args.t_max,
        args.blocks_per_batch,
        world_size=world_size,
        rank=rank,
        seed=args.seed,
        policy=args.policy,
    )


def connect(rank, args, port):
    """Joins the ranks: their store (started here: rank 0's on 127.0.0.1:port; under torchrun:
    MASTER_ADDR:MASTER_PORT, hosted by rank 0 or torchrun's agent), this rank's liveness there (its
    heartbeat, world size and watchdog: bload.distributed), then the process group. Returns (rank,
    world_size, device, liveness, store); a start-up failure after the liveness is up is told to every
    rank (liveness.failed)."""
    backend = "nccl" if args.device == "cuda" else "gloo"
    timeout = datetime.timedelta(seconds=args.timeout)
    if port is None:  # under torchrun: RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
        rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
        store_rank = -1 if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" else 0
    else:
        world_size, host, store_rank = args.world_size, "127.0.0.1", 0
    # The store first, then the liveness, then the group: the group's rendezvous waits for every
    # rank, and the watchdog is what names one that never comes or comes with another world size.
    store = dist.TCPStore(
        host, port, is_master=rank == store_rank, timeout=timeout, wait_for_workers=False
    )
    prefix = f"bload_trainer/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    liveness = bload.distributed.Liveness(
        host,
        port,
        rank,
        world_size,
        window=args.heartbeat_window,
        join_timeout=args.timeout,
        store_rank=store_rank,
        prefix=prefix + "/liveness",
    )
    try:
        dist.init_process_group(
            backend,
            store=dist.PrefixStore(prefix, store),
            rank=rank,
            world_size=world_size,
            timeout=timeout,
        )
        local_rank = int(
            os.environ.get("LOCAL_RANK", rank)
        )  # this rank's index on its machine: its GPU
        device = (
            torch.device(args.device, local_rank % torch.cuda.device_count())
            if args.device == "cuda"
            else torch.device("cpu")
        )
        if device.type == "cuda":
            torch.cuda.set_device(device)
    except Exception as error:
        liveness.failed(error)
        raise
    return rank, world_size, device, liveness, store


class AttentionForward(torch.nn.Module):
    """The eager transformer with a batch's mask: flex_attention with its BlockMask, or SDPA with
    its dense mask, as a module's forward for DistributedDataParallel to run."""

    def __init__(self, module, attention):
        super().__init__()
        self.module, self.attend = module, with_block_mask if attention == "flex" else with_mask

    def forward(self, data, positions, mask):
        return self.module.forward_with(data, positions, self.attend(mask))


def load_model(args, device):
    """--model on `device`: its weights drawn from --seed (the same on every rank), or a file."""
    if args.model == "gru":
        return models.scripted("gru", args.seed).to(device)
    if args.model == "transformer":
        return models.build("transformer", args.seed).to(device)
    return torch.jit.load(args.model, map_location=device)


class LanesForward(torch.nn.Module):
    """The model's forward_lanes as a module's forward, so that DistributedDataParallel runs it
    (DDP prepares its gradient all-reduce in forward)."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, data, table, carry, state):
        return self.module.forward_lanes(data, table, carry, state)


def train(rank, world_size, device, args, liveness):
    """This rank's epochs (from a checkpoint's, with --resume): a list of EpochFigures. Tells
    `liveness` when its start-up is done and before each batch's all-reduce."""
    torch.set_num_threads(1)  # the ranks share this machine's cores
    torch.set_flush_denormal(True)  # decaying recurrent gradients: denormals are ~100x slower
    lengths = lengths_of(args)
    sampler = make_sampler(lengths, args, world_size, rank)
    loader = torch.utils.data.DataLoader(
        bload.BlockDataset(
            bload.SequenceStore(args.store) if args.store else RunningSum(lengths, args.seed),
            args.t_max,
            target_padding=0.0,
            positions="piece",  # what the transformer's positions count (the GRU reads none)
        ),
        batch_sampler=sampler,
        collate_fn=bload.collate,
        num_workers=args.workers,
        pin_memory=device.type == "cuda",
        persistent_workers=args.workers > 0,
    )
    module = load_model(args, device)
    optimizer = torch.optim.Adam(module.parameters(), lr=args.lr)
    # What a checkpoint is valid for: the sampler's position means nothing under other ones. The
    # world size and blocks per batch are not part of it: the sampler's load decides which it
    # resumes with (any world size; lanes, any factors of their lane count).
    identity = {
        "lengths_crc32": zlib.crc32(torch.tensor(lengths).numpy().tobytes()),
        "sequences": len(lengths),
        "t_max": args.t_max,
        "seed": args.seed,
        "policy": args.policy,
    }
    resumed = load_checkpoint(args.checkpoint, module, optimizer, identity) if args.resume else None
    lanes = sampler.plan.carries_state()  # the core says which policies carry state
    if lanes and not hasattr(module, "forward_lanes"):
        raise ValueError(
            f"--policy = 'lanes' with --model = {args.model!r}: expected a recurrent model (a "
            "forward_lanes method, as the GRU's); an attention model carries no state"
        )
    eager_attention = args.model == "transformer"
    # Every lane's recurrent state, this rank's rows of it here (bload keeps it, checkpoints it).
    lane_state = bload.LaneState(sampler, (module.hidden,), device=device) if lanes else None
    if resumed:  # the sampler goes on from the batches the checkpoint holds, on this world size
        saved_lanes = resumed.pop("lane_state", None)
        sampler.load_state_dict(resumed)
        if lanes:
            if saved_lanes is None:
                raise RuntimeError(
                    f"{args.checkpoint}: the lanes' state is missing: expected every lane's, from a lanes run"
                )
            lane_state.load_state_dict(saved_lanes)
    liveness.started()  # the first collective is next
    if args.resume:
        check_resume_points(resumed and (resumed["epoch"], resumed["position"]), world_size)
    # After the load: DDP starts every rank from rank 0's weights.
    if lanes:
        model = DistributedDataParallel(LanesForward(module))
    elif eager_attention:
        model = DistributedDataParallel(AttentionForward(module, args.attention))
    else:
        model = DistributedDataParallel(module)
    log = StepLog(args.step_log, rank, world_size)
    first_epoch = resumed["epoch"] if resumed else 0
    log.start(sampler.state_dict() if resumed else None, args.blocks_per_batch)

    epochs = []
    for epoch in range(first_epoch, args.epochs):
        sampler.set_epoch(epoch)  # the resumed epoch goes on where its checkpoint stood
        first_batch = sampler.state_dict()["position"]
        progress = Progress(rank == 0, len(sampler))
        losses, frames, padding, waited, first_wait = [], 0, 0, 0.0, 0.0
        start = waiting = time.perf_counter()
        for batch in loader:
            # The loop waits here for the next batch; the first wait also starts the workers.
            if losses:
                waited += time.perf_counter() - waiting
            else:
                first_wait = time.perf_counter() - waiting
            index = first_batch + len(losses)  # the batch's index in the plan served
            if not torch.equal(batch.table, sampler.plan.batch(rank, index)):
                raise RuntimeError(
                    f"rank {rank}: the loader's batch {index} of epoch {epoch} is not the plan's"
                )
            on_device = batch.to(device, non_blocking=True)
            data, target, valid = on_device.data, on_device.target, on_device.valid
            if lanes:  # each row goes on from its lane's state where the batch carries it
                outputs, final = model(
                    data, batch.table, on_device.carry, lane_state.initial(on_device)
                )
                lane_state.update(on_device, final)  # detached: gradients stop at the batch's end
            elif eager_attention:  # the batch's own mask: the BlockMask or the dense one
                mask = (
                    on_device.block_mask()
                    if args.attention == "flex"
                    else on_device.attention_mask()
                )
                outputs = model(data, on_device.position_ids, mask)
            else:
                outputs = model(data, batch.table)
            errors = (outputs - target).pow(2).sum(-1)
            # The mean over the batch's real steps. Rounding can leave a rank a batch of padding
            # only: no step to average, a loss of 0 (and zero gradients) rather than 0/0.
            loss = errors[valid].sum() / valid.sum().clamp(min=1)
            optimizer.zero_grad()
            log.write(epoch, index, batch.table)  # before the all-reduce: see ddp_recovery.py
            liveness.advance()  # the watchdogs name a rank that stays behind the others
            loss.backward()  # DDP all-reduces the gradients here
            optimizer.step()
            if args.checkpoint_every and (index + 1) % args.checkpoint_every == 0:
                lanes_saved = lane_state.state_dict() if lanes else None  # every rank: a collective
                if rank == 0:
                    # The batches trained: with workers the sampler has handed out more.
                    state = sampler.state_dict(position=index + 1)
                    save_checkpoint(
                        args.checkpoint, module, optimizer, state, identity, lanes_saved
                    )
            steps = int(batch.valid.sum())
            frames, padding = frames + steps, padding + batch.valid.numel() - steps
            losses.append(loss.item())
            progress.update(len(losses), losses[-1], time.perf_counter() - start, frames)
            waiting = time.perf_counter()
        seconds = time.perf_counter() - start
        first_loss, last_loss = ends_of(losses)
        after_first = seconds - first_wait
        epochs.append(
            EpochFigures(
                epoch=epoch,
                first_batch=first_batch,
                seconds=seconds,
                first_wait=first_wait,
                wait_share=waited / after_first if after_first > 0 else 0.0,
                batches=len(losses),
                frames=frames,
                padding=padding,
                first_loss=first_loss,
                last_loss=last_loss,
            )
        )
    return epochs


def run_rank(rank, args, port):
    """One rank: connect, train, gather every rank's figures for rank 0's report. A failure
    (a collective that timed out or lost a rank, ranks that disagree on the plan, a bad input) is
    one line naming this rank and, where it can tell, the lost one; exit status 3. What the
    watchdog finds (a rank stalled, another world size, a rank that failed at start-up) ends the
    rank the same way, from the watchdog's thread (bload.distributed)."""
    faulthandler.enable()  # an abort in a rank prints where its Python was
    try:
        rank, world_size, device, liveness, store = connect(rank, args, port)
    except Exception as error:  # noqa: BLE001  told to the others where the liveness was up
        print(f"rank {rank}: stopped: {error}", file=sys.stderr, flush=True)
        sys.exit(3)
    failure = None
    try:
        epochs = train(rank, world_size, device, args, liveness)
        # Every rank's figures, gathered (as dicts of the fields): the batch counts must agree.
        gathered = [None] * world_size
        dist.all_gather_object(gathered, [dataclasses.asdict(figures) for figures in epochs])
        # Every rank done with the group before any tears it down: rank 0 hosts the store, and a
        # rank still using it while rank 0 exits has aborted the process at exit.
        dist.barrier()
        liveness.finished()  # the store's host waits here for the others' mark
    except Exception as error:  # noqa: BLE001  torch's RuntimeErrors, and bad inputs' ValueErrors
        failure = str(error)
    # Out of the except block, the traceback is gone, and train()'s DDP with it: destroying the
    # group then closes this rank's connections, so a rank waiting on this one in a collective
    # fails at once rather than at its timeout.
    gc.collect()
    dist.destroy_process_group()
    if failure is not None:
        lost = liveness.failed(failure)  # gloo names a lost peer by its address at best
        print(
            f"rank {rank}: stopped: {lost + ': ' if lost else ''}{failure}",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(3)
    del store  # rank 0's hosts the others' keys: kept until here
    if rank == 0 and not report(args, world_size, device, gathered):
        sys.exit(4)
    # The rank's work is done and reported: it leaves without the interpreter's teardown, where a
    # gloo thread still freeing the last all-reduce can abort the process (rank_exit.py).
    exit_without_teardown()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_start_method(device):
    """How this process starts the ranks. On the CPU, forked (it has no process group yet, as a
    DataLoader forking its workers): each shares the torch and compiler modules imported here,
    which a spawned rank imports again (about 3 s of CPU). CUDA ranks are spawned: a forked
    child cannot use CUDA once its parent has asked for the devices, as --device's default did."""
    if device == "cuda":
        return "spawn"
    import torch._dynamo  # noqa: F401  imported once, here, rather than by every rank's optimizer

    return "fork"


def write_store(args):
    """The generated sequences of --lengths (--sequences of them) as a store at --store, once."""
    if args.store and not os.path.exists(args.store):
        lengths = bload.read_lengths(args.lengths).tolist()
        lengths = lengths[: args.sequences] if args.sequences else lengths
        bload.store.write(args.store, RunningSum(lengths, args.seed), progress=False)


def main():
    args = parse()
    if "RANK" in os.environ and args.store and not os.path.exists(args.store):
        sys.exit(
            f"error: --store {args.store}: no store there; write it first (this trainer without torchrun writes it)"
        )
    write_store(args)
    if "RANK" in os.environ:
        run_rank(int(os.environ["RANK"]), args, None)
        return
    try:
        make_sampler(lengths_of(args), args, args.world_size, 0)
    except (RuntimeError, ValueError) as error:
        sys.exit(f"error: {str(error).splitlines()[0]}")
    try:
        torch.multiprocessing.start_processes(
            run_rank,
            args=(args, free_port()),
            nprocs=args.world_size,
            start_method=rank_start_method(args.device),
        )
    except torch.multiprocessing.ProcessExitedException as error:  # the rank said why
        sys.exit(f"{error}: stopping the other ranks")


if __name__ == "__main__":
    main()
