"""A packed batch as attention models take it (see docs/attention.md): flex_attention's BlockMask
made from the kv-block tables the core writes from the block table, the dense mask for SDPA, and
the keyword arguments Hugging Face's padding-free FlashAttention-2 path takes.

A batch's documents are its pieces and its runs of padding, each run a document of its own (so no
query row of a mask is empty). PackedBatch's block_mask(), attention_mask() and hf_kwargs() call
these.
"""

import torch
from torch.nn.attention.flex_attention import BlockMask

from bload import ops
from bload._device import host_to_device
from bload.labels import causal_labels

__all__ = [
    "DocumentBlockMask",
    "DocumentMask",
    "block_mask",
    "flatten",
    "hf_kwargs",
    "piece_position_ids",
]


class DocumentMask:
    """flex_attention's mask_mod of a batch's documents: query q of row b attends to key k when
    both lie in the same document (document_ids [blocks, t_max]) and, when `causal`, k <= q. A
    class rather than a closure, so that a BlockMask made in a DataLoader worker can be sent."""

    def __init__(self, document_ids, causal):
        self.document_ids, self.causal = document_ids, causal

    def __call__(self, b, h, q, kv):
        same = self.document_ids[b, q] == self.document_ids[b, kv]
        return same & (q >= kv) if self.causal else same

    def to(self, device):
        return DocumentMask(self.document_ids.to(device), self.causal)


class DocumentBlockMask(BlockMask):
    """A BlockMask whose to(device) also moves its mask_mod's document ids (torch's BlockMask.to
    moves its own tensors only)."""

    def to(self, device):
        moved = super().to(device)
        moved.__class__ = DocumentBlockMask
        if isinstance(self.mask_mod, DocumentMask):
            moved.mask_mod = self.mask_mod.to(device)
        return moved


def block_mask(batch, causal=True, block_size=128):
    """flex_attention's BlockMask of `batch`'s documents: BlockMask.from_kv_blocks of the kv-block
    tables the core writes from the table (no [t_max, t_max] mask is made, nothing is compiled),
    with DocumentMask over batch.document_ids for the partly allowed tiles. One head, broadcast
    over all. On the batch's device."""
    check_causal(causal)
    tiles = ops.kv_blocks(batch.table, batch.blocks, batch.t_max, block_size, causal)
    if batch.device is not None:
        tiles = [host_to_device(tensor, batch.device) for tensor in tiles]
    return DocumentBlockMask.from_kv_blocks(
        *tiles,
        BLOCK_SIZE=block_size,
        mask_mod=DocumentMask(batch.document_ids, causal),
        seq_lengths=(batch.t_max, batch.t_max),
    )


def check_causal(causal):
    """A TypeError unless `causal` is True or False: the core's operators take None or 0 as
    False, so a mask asked for with causal=None would silently let every step see the steps
    after it."""
    if not isinstance(causal, bool):
        raise TypeError(f"causal = {causal!r}: expected True or False")


def flatten(batch, packed):
    """`packed` [blocks, t_max, ...] as Hugging Face's padding-free layout [1, steps, ...]: the
    valid steps in block then step order (the order of cu_seqlens)."""
    return packed.flatten(0, 1)[batch.valid.flatten()].unsqueeze(0)


def piece_position_ids(batch):
    """int64 [blocks, t_max]: positions from 0 at every piece's first step, whatever the batch's
    own positions count from, on the batch's device. Hugging Face models find where packed
    sequences start from their position_ids (a step whose position is not the previous one's
    plus 1): positions counted from the sequence's start would hide a boundary wherever a split
    sequence's later piece happens to go on from the piece before it in the row."""
    if batch.positions == "piece":
        return batch.position_ids
    made = ops.batch_tables(batch.table, batch.blocks, batch.t_max, positions="piece")
    return made["position_ids"].to(batch.valid.device)


def hf_kwargs(batch, input_ids=None, labels=None, separator_id=-100):
    """What transformers' DataCollatorWithFlattening(return_flash_attn_kwargs=True,
    return_seq_idx=True) returns for the batch's pieces as its sequences, in its layout: position_ids
    int64 [1, steps] from 0 at every piece, seq_idx int32 [1, steps] (the piece's index),
    cu_seq_lens_q and cu_seq_lens_k int32 [pieces + 1], max_length_q and max_length_k Python ints.
    With `input_ids` ([blocks, t_max], e.g. batch.data), also input_ids [1, steps] and labels: the
    `labels` given (else input_ids) with `separator_id` at every piece's first step, as the
    collator writes them (bload.causal_labels' rule). And use_cache=False, which the collator
    does not give: without it a transformers model with eager or SDPA attention makes a cache
    and then ignores the packing (docs/isolation.md)."""
    pieces = batch.table[:, ops.COLUMN["length"]]
    position_ids = piece_position_ids(batch)
    seq_idx = torch.repeat_interleave(torch.arange(len(pieces), dtype=torch.int32), pieces)
    kwargs = {
        # A transformers model that makes a cache (use_cache defaults to the config's, True)
        # does not look for packed sequences in position_ids, and its eager and SDPA attention
        # then run across the pieces (transformers 5.24; found by bload.check_isolation).
        "use_cache": False,
        "position_ids": flatten(batch, position_ids),
        "seq_idx": seq_idx.unsqueeze(0).to(batch.valid.device),
        "cu_seq_lens_q": batch.cu_seqlens,
        "cu_seq_lens_k": batch.cu_seqlens,
        "max_length_q": batch.max_seqlen,
        "max_length_k": batch.max_seqlen,
    }
    if input_ids is not None:
        kwargs["input_ids"] = flatten(batch, input_ids)
        labels = causal_labels(batch, input_ids if labels is None else labels, separator_id)
        kwargs["labels"] = flatten(batch, labels)
    return kwargs
