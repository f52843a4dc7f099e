"""Real tokens per second of a small causal transformer trained on LLM-like documents: the same
model, documents and tokens, loaded and attended four ways, for BENCHMARKS.md (issue 35):

    bload + flex     bload's packed batches (best_fit, blocks of t_max), flex_attention
                     (compiled) with the batch's BlockMask, batch.block_mask()
    bload + sdpa     the same batches, SDPA with the dense block-diagonal causal mask,
                     batch.attention_mask()
    bload + varlen   the same batches, torch's varlen_attn over batch.cu_seqlens_padded (each
                     piece and each run of padding its own sequence; CUDA, where torch has it)
    padded           the documents shuffled, each batch padded to its longest, SDPA causal (a
                     padded step comes after every real one of its row, so the causal mask alone
                     keeps it out of them), as many documents a batch as bload's average

Every loader is a DataLoader with workers and pin_memory, read through bload.DevicePrefetcher:
each batch taken, moved with .to(device, non_blocking=True) and its mask made in a background
thread, ahead of the loop; "bload + flex, in the loop" does the same in the training thread, as
the first GPU run did. Each step ends with loss.item(), so while the loop waits for the next batch
the GPU is idle too: "wait" is that time over the epoch's, the first batch's (the workers' start)
left out. Documents are lognormal (median 600 tokens, sigma 1) cut at t_max, as a
tokenizer's max_length cuts them; their tokens are random (the speed does not depend on them).
Each way first trains WARM steps untimed (compiling flex_attention), then one epoch timed.

    python benches/llm_tokens.py --device cuda          # bf16 autocast, t_max 4096
    python benches/llm_tokens.py --device cpu --quick   # tests/gpu/run.sh --cpu: tiny, float32
"""

import argparse
import inspect
import math
import time

import bload
import torch
import torch.nn.functional as F
from bload.device_prefetch import to_device
from padded_batches import pad_collate_with_mask
from torch import nn
from torch.nn.attention.flex_attention import flex_attention

WARM = 3


class Documents(torch.utils.data.Dataset):
    """Item i: (tokens [T_i], next tokens [T_i], -100 after the last) of one random-token
    document; the tokens of every document drawn once from `seed`."""

    def __init__(self, lengths, vocabulary, seed=0):
        generator = torch.Generator().manual_seed(seed)
        self.tokens = torch.randint(vocabulary, (sum(lengths),), generator=generator)
        self.starts = [0]
        for length in lengths:
            self.starts.append(self.starts[-1] + length)

    def __len__(self):
        return len(self.starts) - 1

    def __getitem__(self, i):
        tokens = self.tokens[self.starts[i] : self.starts[i + 1]]
        return tokens, torch.cat([tokens[1:], torch.tensor([-100])])


class Layer(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.attention_norm, self.mlp_norm = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, hidden, attend):
        rows, steps, width = hidden.shape
        qkv = self.qkv(self.attention_norm(hidden)).view(rows, steps, 3, self.heads, -1)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each [rows, heads, steps, head width]
        attended = attend(q, k, v).transpose(1, 2).reshape(rows, steps, width)
        hidden = hidden + self.out(attended)
        return hidden + self.mlp(self.mlp_norm(hidden))


class CausalLM(nn.Module):
    """Token and learned position embeddings, pre-norm layers, a linear head."""

    def __init__(self, vocabulary, width, heads, layers, positions):
        super().__init__()
        self.embed, self.position = nn.Embedding(vocabulary, width), nn.Embedding(positions, width)
        self.layers = nn.ModuleList(Layer(width, heads) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(width), nn.Linear(width, vocabulary)

    def forward(self, tokens, positions, attend):
        hidden = self.embed(tokens) + self.position(positions)
        for layer in self.layers:
            hidden = layer(hidden, attend)
        return self.head(self.norm(hidden))


def varlen_attend(batch):
    """attend(q, k, v) by torch's varlen_attn over the flattened batch, its sequences the pieces
    and padding runs of batch.cu_seqlens_padded, causal."""
    from torch.nn.attention.varlen import varlen_attn

    cu = batch.cu_seqlens_padded
    causal = (
        {"is_causal": True}
        if "is_causal" in inspect.signature(varlen_attn).parameters
        else {"window_size": (-1, 0)}
    )

    def attend(q, k, v):
        rows, heads, steps, width = q.shape

        def flat(x):
            return x.transpose(1, 2).reshape(rows * steps, heads, width)

        out = varlen_attn(flat(q), flat(k), flat(v), cu, cu, steps, steps, **causal)
        return out.view(rows, steps, heads, width).transpose(1, 2)

    return attend


def bload_step(way, compiled_flex):
    """What a step needs from one of bload's batches (on the device): (tokens, positions,
    targets, attend, real tokens), the mask made here."""

    def prepare(on):
        if way == "flex":
            mask = on.block_mask()
            attend = lambda q, k, v: compiled_flex(q, k, v, block_mask=mask)  # noqa: E731
        elif way == "sdpa":
            mask = on.attention_mask().unsqueeze(1)
            attend = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # noqa: E731
        else:
            attend = varlen_attend(on)
        # The pieces' lengths, from the host's table: no sync.
        real = int(on.table[:, bload.ops.COLUMN["length"]].sum())
        return on.data, on.position_ids, on.target, attend, real

    return prepare


def causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def padded_step(batch):
    """What a step needs from a padded batch (on the device)."""
    tokens, targets, valid = batch
    positions = torch.arange(tokens.size(1), device=tokens.device).expand_as(tokens)
    return tokens, positions, targets, causal, int(valid.sum())


def train(model, steps, device, dtype, limit=None, sleep=None):
    """Trains on `steps` (at most `limit` of them): (seconds, real tokens, steps in all (padding
    too), wait share, losses). With `sleep`, each step is a sleep of that many seconds instead
    (the loader's side alone: the wait of a loop whose steps take that long; losses are 0)."""
    optimizer = (
        None if sleep else torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
    )
    seconds = waited = first_wait = 0.0
    tokens_seen, in_all, losses = 0, 0, []
    start = waiting = time.perf_counter()
    for tokens, positions, targets, attend, real in steps:
        now = time.perf_counter()
        if losses:
            waited += now - waiting
        else:
            first_wait = now - waiting
        if sleep:
            time.sleep(sleep)  # releases the GIL, as a wait for the GPU does
            losses.append(0.0)
        else:
            with torch.autocast(device, dtype=dtype, enabled=dtype != torch.float32):
                logits = model(tokens, positions, attend)
            loss = F.cross_entropy(
                logits.flatten(0, 1).float(), targets.flatten(), ignore_index=-100
            )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())  # the step's end: the GPU has finished it
        tokens_seen, in_all = tokens_seen + real, in_all + tokens.numel()
        waiting = time.perf_counter()
        if limit is not None and len(losses) == limit:
            break
    seconds = time.perf_counter() - start
    after_first = seconds - first_wait
    return seconds, tokens_seen, in_all, waited / after_first if after_first > 0 else 0.0, losses


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="a tiny model and set (the CPU check)")
    parser.add_argument("--t-max", type=int, default=4096)
    parser.add_argument("--blocks", type=int, default=4, help="blocks of t_max a batch")
    parser.add_argument("--documents", type=int, default=1500)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--sleep-step",
        type=float,
        help="no model: each step a sleep of this many seconds (the loader's wait alone; flex and "
        "varlen then only make their masks and tables, on any device)",
    )
    parser.add_argument("--ways", default="flex,flex-loop,sdpa,varlen,padded")
    args = parser.parse_args()
    if args.quick:
        args.t_max, args.blocks, args.documents = 128, 2, 60
    vocabulary, width, heads, layers = (256, 32, 2, 1) if args.quick else (16384, 512, 8, 4)
    device = args.device
    dtype = torch.bfloat16 if device == "cuda" else torch.float32

    generator = torch.Generator().manual_seed(0)
    median = min(600, args.t_max // 4)
    drawn = torch.exp(torch.randn(args.documents, generator=generator) + math.log(median))
    lengths = drawn.round().clamp(2, args.t_max).long().tolist()
    documents = Documents(lengths, vocabulary)
    sampler = bload.BlockSampler(lengths, args.t_max, args.blocks, world_size=1, rank=0)
    per_batch = max(1, round(len(lengths) / len(sampler)))
    print(
        f"{len(lengths)} documents, {sum(lengths)} tokens (median {median}, sigma 1, cut at "
        f"t_max {args.t_max}); "
        + (
            f"no model: each step a sleep of {args.sleep_step} s; "
            if args.sleep_step
            else f"model: vocabulary {vocabulary}, width {width}, {heads} heads, {layers} layers, "
            f"{dtype}; "
        )
        + f"{args.workers} workers, pin_memory={device == 'cuda'}; "
        f"bload: {len(sampler)} batches of {args.blocks} blocks; padded: {per_batch} documents a "
        f"batch",
        flush=True,
    )

    def bload_loader():
        dataset = bload.BlockDataset(documents, args.t_max, data_padding=0, positions="piece")
        return torch.utils.data.DataLoader(
            dataset,
            batch_sampler=sampler,
            collate_fn=bload.collate,
            num_workers=args.workers,
            pin_memory=device == "cuda",
        )

    def padded_loader():
        return torch.utils.data.DataLoader(
            documents,
            batch_size=per_batch,
            shuffle=True,
            generator=torch.Generator().manual_seed(0),
            collate_fn=pad_collate_with_mask,
            num_workers=args.workers,
            pin_memory=device == "cuda",
        )

    compiled_flex = torch.compile(flex_attention, dynamic=False) if device == "cuda" else None
    names = {
        "flex": "bload + flex_attention (BlockMask)",
        "sdpa": "bload + SDPA (dense mask)",
        "varlen": "bload + varlen_attn",
        "padded": "padded to each batch's longest + SDPA causal",
    }
    for way in args.ways.split(","):
        if way.removesuffix("-loop") not in names:
            parser.error(
                f"--ways: {way!r}: expected some of {', '.join(names)}, each also with -loop"
            )
    rows = {}
    for way in args.ways.split(","):
        if (
            way.removesuffix("-loop") in ("flex", "varlen")
            and device != "cuda"
            and not args.sleep_step
        ):
            print(f"{way}: skipped (CUDA only here)", flush=True)
            continue

        def steps(way=way):
            attention = way.removesuffix("-loop")
            loader = padded_loader() if attention == "padded" else bload_loader()
            prepare = padded_step if attention == "padded" else bload_step(attention, compiled_flex)
            if way.endswith("-loop"):  # taken, moved and prepared in the training thread
                return (prepare(to_device(batch, device)) for batch in loader)
            return bload.DevicePrefetcher(loader, device, prepare=prepare)

        torch.manual_seed(0)
        model = CausalLM(vocabulary, width, heads, layers, args.t_max).to(device)
        try:
            train(model, steps(), device, dtype, WARM, args.sleep_step)  # compiles; not timed
            rows[way] = train(model, steps(), device, dtype, None, args.sleep_step)
        except Exception as error:  # one way's failure is reported, the others still run
            print(f"{way}: FAILED: {type(error).__name__}: {str(error)[:500]}", flush=True)
            continue
        print(f"{way}: {rows[way][0]:.2f} s", flush=True)
    print(
        "\n| loader + attention | real tokens | tokens in all | epoch s | real tokens/s | vs padded | wait | loss first, last |"
    )
    print("|---|---|---|---|---|---|---|---|")
    padded = rows.get("padded")
    for way, (seconds, real, in_all, wait, losses) in rows.items():
        ratio = f"{(real / seconds) / (padded[1] / padded[0]):.2f}x" if padded else "-"
        print(
            f"| {names[way.removesuffix('-loop')]}{', in the loop' if way.endswith('-loop') else ''} | {real:,} | {in_all:,} | {seconds:.2f} | {real / seconds:,.0f} | "
            f"{ratio} | {100 * wait:.2f}% | {losses[0]:.3f}, {losses[-1]:.3f} |"
        )


if __name__ == "__main__":
    main()
