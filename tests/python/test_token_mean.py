"""The exact token mean without a collective: each batch carries its global batch's real steps
and pieces from the plan (batch.global_valid, batch.global_pieces), and a rank's summed loss
scaled by batch.loss_scale() gives, once DDP averages the ranks' gradients, the gradient of the
token mean over the whole global batch. Checked for every policy, for cost="attention:A" and
for a causal LM's shifted labels, on 1, 2 and 4 ranks at a fixed world_size * blocks_per_batch
(the same global batches, so the same steps), against a single process, to 1e-12 in float64;
and once through DDP itself on 2 and 4 gloo ranks."""

import multiprocessing
import os
import pathlib

import bload
import pytest
import torch
from rank_exit import exit_without_teardown

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The text-shaped set's first sequences: long-tailed, many longer than a small t_max.
LENGTHS = bload.read_lengths(ROOT / "examples" / "data" / "text_like.lengths")[:400].tolist()
T_MAX, GLOBAL_BLOCKS, FEATURES, VOCABULARY, STEPS = 512, 8, 3, 16, 3
RELATIVE = 1e-12


class Sequences(torch.utils.data.Dataset):
    """Sequence i: float64 features [T_i, FEATURES] and a token per step, drawn from seed i."""

    def __getitem__(self, index):
        generator = torch.Generator().manual_seed(index)
        steps = LENGTHS[index]
        data = torch.randn(steps, FEATURES, generator=generator, dtype=torch.float64)
        tokens = torch.randint(0, VOCABULARY, (steps,), generator=generator)
        return data, tokens

    def __len__(self):
        return len(LENGTHS)


PLANS = {
    "best_fit split": dict(policy="best_fit", split=True),
    "best_fit split attention": dict(policy="best_fit", split=True, cost="attention:64"),
    "random_fill split": dict(policy="random_fill", split=True),
    "pad_to_max split": dict(policy="pad_to_max", split=True),
    "lanes": dict(policy="lanes"),
}


def rank_batches(world_size, rank, plan, count=STEPS):
    sampler = bload.BlockSampler(
        LENGTHS,
        T_MAX,
        GLOBAL_BLOCKS // world_size,
        world_size=world_size,
        rank=rank,
        seed=7,
        **PLANS[plan],
    )
    dataset = bload.BlockDataset(Sequences(), T_MAX)
    batches = []
    for table in sampler:
        batches.append(dataset.__getitems__(table))
        if len(batches) == count:
            return batches
    return batches


class Net(torch.nn.Module):
    """A per-step regression and a bigram causal LM over the same batch."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.regression = torch.nn.Linear(FEATURES, 1, dtype=torch.float64)
        self.bigram = torch.nn.Embedding(VOCABULARY, VOCABULARY, dtype=torch.float64)

    def forward(self, batch):
        """(the regression loss summed over the valid steps, the causal LM's shifted loss summed
        over bload.causal_labels): each a rank's sum, not a mean."""
        predicted = self.regression(batch.data).squeeze(-1)
        regression = ((predicted - batch.target.double()) ** 2)[batch.valid].sum()
        labels = bload.causal_labels(batch)
        logits = self.bigram(batch.target.clamp(min=0))
        shifted = torch.nn.functional.cross_entropy(
            logits[:, :-1].flatten(0, 1),
            labels[:, 1:].flatten(),
            ignore_index=-100,
            reduction="sum",
        )
        return regression, shifted


def model():
    return Net()


def summed_losses(net, batch):
    return net(batch)


def scaled_gradients(net, batch):
    """The rank's gradient of both losses, each scaled by the batch's loss scale."""
    regression, shifted = summed_losses(net, batch)
    loss = regression * batch.loss_scale() + shifted * batch.loss_scale(shifted=True)
    return torch.autograd.grad(loss, list(net.parameters()))


def averaged(gradients):
    """What DDP's all-reduce leaves on every rank: the ranks' gradients averaged."""
    return [torch.stack(parts).mean(0) for parts in zip(*gradients)]


def assert_close(ours, theirs):
    for a, b in zip(ours, theirs):
        scale = float(b.abs().max())
        assert float((a - b).abs().max()) <= RELATIVE * scale, (a, b)


@pytest.mark.parametrize("plan", list(PLANS))
def test_ranks_scaled_by_loss_scale_average_to_one_processs_token_mean(plan):
    net = model()
    all_ranks = {w: [rank_batches(w, rank, plan) for rank in range(w)] for w in (2, 4)}
    whole = rank_batches(1, 0, plan)
    assert len(whole) == STEPS
    for step, batch in enumerate(whole):
        # One process over the global batch: the scale is 1 / its count of targets.
        regression, shifted = summed_losses(net, batch)
        targets = int(batch.valid.sum())
        labels = int((bload.causal_labels(batch) != -100).sum())
        assert (batch.global_valid, batch.global_valid - batch.global_pieces) == (targets, labels)
        assert batch.loss_scale() == 1 / targets and batch.loss_scale(True) == 1 / labels
        expected = scaled_gradients(net, batch)
        for world_size in (2, 4):
            ranks = [all_ranks[world_size][rank][step] for rank in range(world_size)]
            # The same global batch: every rank's batch carries its counts.
            assert {(b.global_valid, b.global_pieces) for b in ranks} == {
                (batch.global_valid, batch.global_pieces)
            }
            assert sum(int(b.valid.sum()) for b in ranks) == batch.global_valid
            assert_close(averaged([scaled_gradients(net, b) for b in ranks]), expected)


def test_a_batch_made_by_hand_has_no_global_counts():
    sampler = bload.BlockSampler(LENGTHS, T_MAX, 2, split=True)
    dataset = bload.BlockDataset(Sequences(), T_MAX)
    batch = dataset.pack(next(iter(sampler)).table, 2)
    assert batch.global_valid is None and batch.global_pieces is None
    with pytest.raises(ValueError, match="loss_scale\\(\\): this batch has no global batch counts"):
        batch.loss_scale()
    served = dataset.__getitems__(next(iter(sampler)))
    # The counts travel with the batch: pickled (from a worker), moved, pinned.
    import pickle

    assert pickle.loads(pickle.dumps(served)).global_batch == served.global_batch
    assert served.to("cpu").global_batch == served.global_batch


def ddp_rank(rank, world_size, store, out):
    torch.set_num_threads(1)
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{store}", world_size=world_size, rank=rank
    )
    try:
        gradients = {}
        for plan in PLANS:
            net = torch.nn.parallel.DistributedDataParallel(model())
            batch = rank_batches(world_size, rank, plan, count=1)[0]
            regression, shifted = net(batch)
            # One backward through DDP: its all-reduce averages the scaled gradients.
            (regression * batch.loss_scale() + shifted * batch.loss_scale(shifted=True)).backward()
            gradients[plan] = [p.grad for p in net.parameters()]
        if rank == 0:
            torch.save(gradients, out)
    finally:
        torch.distributed.destroy_process_group()
    exit_without_teardown()  # a gloo thread may still free DDP's last all-reduce (rank_exit.py)


@pytest.mark.parametrize("world_size", [2, 4])
def test_ddp_on_gloo_ranks_gives_one_processs_token_mean_gradient(world_size, tmp_path):
    # Spawned: a process forked after autograd ran in this one cannot run a backward of its own.
    context = multiprocessing.get_context("spawn")
    out = tmp_path / "gradients.pt"
    ranks = [
        context.Process(target=ddp_rank, args=(rank, world_size, tmp_path / "store", out))
        for rank in range(world_size)
    ]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join(timeout=300)
    codes = [process.exitcode for process in ranks]
    for process in ranks:
        if process.is_alive():
            os.kill(process.pid, 9)
    assert codes == [0] * world_size
    gradients = torch.load(out)
    for plan in PLANS:  # every policy, and the attention cost
        expected = scaled_gradients(model(), rank_batches(1, 0, plan, count=1)[0])
        assert_close(gradients[plan], expected)
