"""bload's operators with typed, documented signatures: thin calls of torch.ops.bload.*, which
run on CPU and CUDA tensors, in eager mode, TorchScript, torch.compile and torch.export.

A **block table** is an int64 tensor [pieces, 6], one row per piece in block order, with the
columns `table_columns()` names: block, block_offset, length, sequence, offset, sequence_length.
Row i says: `length` steps of sequence `sequence`, from its step `offset` (of `sequence_length`),
lie in block `block` from step `block_offset`. Index rows by name (`COLUMN["sequence"]`), never by
a bare number. Every operator checks every cell, and a bad one raises a RuntimeError naming it.
"""

import os
from typing import Dict, List, Optional, Sequence, Union

import torch

from bload import _library
from bload.fields import TABLE_FIELDS

_library.load()

__all__ = [
    "COLUMN",
    "attention_mask",
    "batch_tables",
    "carry_mask",
    "cu_seqlens",
    "end_mask",
    "kv_blocks",
    "max_seqlen",
    "pack",
    "pack_backward",
    "position_ids",
    "read_lengths",
    "reset_mask",
    "segment_ids",
    "table_columns",
    "unpack",
    "valid_mask",
]

Tensor = torch.Tensor


def table_columns() -> List[str]:
    """The block table's column names, in order: the Rust core's layout (bload::Column)."""
    return list(torch.ops.bload.table_columns())


#: A block table's column index by name: `table[:, COLUMN["sequence"]]`.
COLUMN = {name: index for index, name in enumerate(table_columns())}


def read_lengths(path: Union[str, os.PathLike], format: Optional[str] = None) -> Tensor:
    """A lengths file as int64 [sequences], read by the core's readers (the CLI's and C++'s):
    text (one length per line; blank lines and `#` comments skipped; CRLF and a missing final
    newline accepted), a 1-D integer .npy or a Megatron .idx, chosen by the file's first bytes,
    then its extension, unless `format` ("text", "npy", "idx") says. A bad file raises a
    RuntimeError naming it (and a text file's line). bload.read_lengths also reads Arrow,
    Parquet and Hugging Face datasets."""
    return torch.ops.bload.read_lengths(os.fspath(path), format)


def batch_tables(
    table: Tensor,
    blocks: int,
    t_max: int,
    carry: bool = False,
    first_lane: int = 0,
    positions: str = "sequence",
) -> Dict[str, Tensor]:
    """Every field of a packed batch that its block table determines, by name (reset, valid, ends,
    carry, lanes, segment_ids, position_ids, cu_seqlens, indices, state_in, state_out, document_ids,
    cu_seqlens_padded: the core's declaration, see bload.PackedBatch), from one check of the table,
    on the table's device. `carry` as for reset_mask; row j is lane `first_lane + j`; `positions`
    "sequence" (position_ids count from the sequence's start) or "piece" (from 0 at every piece).
    What bload.PackedBatch calls the first time one of them is read; the operator itself
    (torch.ops.bload.batch_tables) returns them as a list in that order."""
    made = torch.ops.bload.batch_tables(table, blocks, t_max, carry, first_lane, positions)
    return dict(zip(TABLE_FIELDS, made))


def max_seqlen(table: Tensor, blocks: int, t_max: int) -> int:
    """The longest piece's steps (0 for a table of no row), a Python int read from the table where
    it is (on the host, for a batch's table): varlen kernels' max_seqlen, with no device sync."""
    return torch.ops.bload.max_seqlen(table, blocks, t_max)


def attention_mask(table: Tensor, blocks: int, t_max: int, causal: bool = True) -> Tensor:
    """bool [blocks, t_max, t_max]: true where query step q may attend to key step k, both in the
    same document (a piece, or a run of padding: each its own document, so no row is all false);
    with `causal`, also k <= q. SDPA's attn_mask after .unsqueeze(1); TorchScript models call the
    operator."""
    return torch.ops.bload.attention_mask(table, blocks, t_max, causal)


def kv_blocks(table: Tensor, blocks: int, t_max: int, block_size: int = 128, causal: bool = True):
    """flex_attention's kv-block tables of attention_mask's mask for tiles of `block_size` steps,
    as BlockMask.from_kv_blocks takes them: (kv_num_blocks int32 [blocks, 1, tiles], kv_indices
    int32 [blocks, 1, tiles, tiles], full_kv_num_blocks, full_kv_indices), made from the table
    alone. bload.PackedBatch.block_mask() builds the BlockMask."""
    return torch.ops.bload.kv_blocks(table, blocks, t_max, block_size, causal)


def reset_mask(table: Tensor, blocks: int, t_max: int, carry: bool = False) -> Tensor:
    """bool [blocks, t_max]: true at the first step of every piece, where a recurrent model's
    state starts from zero. carry: the rows carry their state from the previous batch (the lanes
    policy), so only the starts of sequences reset, and a piece may continue its sequence only
    at the start of its row."""
    return torch.ops.bload.reset_mask(table, blocks, t_max, carry)


def end_mask(table: Tensor, blocks: int, t_max: int) -> Tensor:
    """bool [blocks, t_max]: true at the last step of every sequence (a loss on a sequence's final
    state reads the outputs there)."""
    return torch.ops.bload.end_mask(table, blocks, t_max)


def carry_mask(table: Tensor, blocks: int, t_max: int) -> Tensor:
    """bool [blocks]: true where the row's first step continues the state the row had at the end
    of the previous batch (lanes); a model keeps that state and zeroes the other rows'."""
    return torch.ops.bload.carry_mask(table, blocks, t_max)


def valid_mask(table: Tensor, blocks: int, t_max: int) -> Tensor:
    """bool [blocks, t_max]: true on real steps, false on padding."""
    return torch.ops.bload.valid_mask(table, blocks, t_max)


def segment_ids(table: Tensor, blocks: int, t_max: int) -> Tensor:
    """int32 [blocks, t_max]: the index of each step's piece inside its block, -1 on padding
    (a block-diagonal attention mask is `ids[:, :, None] == ids[:, None, :]` off padding)."""
    return torch.ops.bload.segment_ids(table, blocks, t_max)


def position_ids(table: Tensor, blocks: int, t_max: int) -> Tensor:
    """int64 [blocks, t_max]: each step's index in its sequence (counting from the piece's offset
    for a split sequence), 0 on padding."""
    return torch.ops.bload.position_ids(table, blocks, t_max)


def cu_seqlens(table: Tensor) -> Tensor:
    """int32 [pieces + 1]: the prefix sums of the pieces' lengths, flash-attention's varlen
    offsets."""
    return torch.ops.bload.cu_seqlens(table)


def pack(
    sequences: Sequence[Tensor],
    table: Tensor,
    blocks: int,
    t_max: int,
    padding_value: float = 0,
    *,
    out: Optional[Tensor] = None,
) -> Tensor:
    """[blocks, t_max, ...]: the pieces the table names, laid where the table says, and
    `padding_value` everywhere else. `sequences[i]` is row i's whole sequence [sequence_length,
    ...], from which the piece is cut, or the piece alone [length, ...] (as a dataset that reads
    ranges gives it). Every output element is written once.

    out: a tensor [blocks, t_max, ...] of the sequences' dtype and device to write into (a buffer
    reused batch after batch, or pinned memory) instead of a new one; it is returned. Records no
    gradient. Without it, pack is differentiable with respect to the sequences."""
    if out is not None:
        if tuple(out.shape[:2]) != (blocks, t_max):
            raise ValueError(
                f"out: expected shape [blocks, t_max, ...] = [{blocks}, {t_max}, ...], got {list(out.shape)}"
            )
        torch.ops.bload.pack_into(out, list(sequences), table, padding_value)
        return out
    return torch.ops.bload.pack(list(sequences), table, blocks, t_max, padding_value)


def unpack(packed: Tensor, table: Tensor) -> List[Tensor]:
    """The pieces of a packed [blocks, t_max, ...] tensor, one [length, ...] tensor per table row
    (pack's inverse on the real steps). Differentiable; no Meta kernel (its shapes are the table's
    values), so eager and TorchScript only."""
    return list(torch.ops.bload.unpack(packed, table))


def pack_backward(grad: Tensor, table: Tensor, steps: Sequence[int]) -> List[Tensor]:
    """pack's gradient: one [steps[i], ...] tensor per table row (the length of the tensor given
    to pack for it), zero outside row i's piece."""
    return list(torch.ops.bload.pack_backward(grad, table, list(steps)))
