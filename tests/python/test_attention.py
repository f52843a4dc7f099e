"""A packed batch as attention models take it: document ids and padded varlen offsets, max_seqlen
as a host int, positions from each piece, Hugging Face's padding-free keyword arguments equal to
transformers' own collator's, flex_attention's BlockMask from the core's kv-block tables equal to
create_block_mask's (made in a worker too, and moved), and the dense mask operator (opcheck'ed)."""

import pickle

import bload
import pytest
import torch
from test_package import Numbered
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

T_MAX = 40
COLUMN = bload.ops.COLUMN
# Lengths above T_MAX are split into pieces (split=True); padding is left in most blocks.
LENGTHS = [7, 33, 12, 5, 90, 21, 18, 2, 40, 3, 61, 9, 14, 27]


def packed(positions="sequence", blocks=3, workers=0):
    sampler = bload.BlockSampler(LENGTHS, T_MAX, blocks, policy="best_fit", split=True)
    dataset = bload.BlockDataset(Numbered(LENGTHS), T_MAX, positions=positions)
    loader = torch.utils.data.DataLoader(
        dataset, batch_sampler=sampler, collate_fn=bload.collate, num_workers=workers
    )
    return list(loader)


def rows(batch):
    return [dict(zip(COLUMN, row)) for row in batch.table.tolist()]


def test_documents_are_pieces_and_padding_runs_over_the_flattened_layout():
    batches = packed()
    assert any(row["offset"] > 0 for batch in batches for row in rows(batch)), (
        "no split piece to test"
    )
    for batch in batches:
        ids = batch.document_ids.flatten().tolist()
        cu = batch.cu_seqlens_padded
        assert batch.document_ids.dtype == cu.dtype == torch.int32
        assert cu.shape == (2 * len(batch.table) + batch.blocks + 1,)
        # Documents numbered in order: each id one run, and cu_seqlens_padded its bounds.
        runs = torch.unique_consecutive(batch.document_ids.flatten(), return_counts=True)
        assert runs[0].tolist() == list(range(len(runs[0])))
        bounds = [0] + torch.cumsum(runs[1], 0).tolist()
        assert cu.tolist() == bounds + [batch.blocks * T_MAX] * (len(cu) - len(bounds))
        # Every piece is a document of its own; a run is either all real steps or all padding.
        valid = batch.valid.flatten()
        for start, end in zip(bounds, bounds[1:]):
            assert valid[start:end].all() or not valid[start:end].any()
        assert sum(bool(valid[start]) for start in bounds[:-1]) == len(batch.table)
        assert len(set(ids)) == len(bounds) - 1
        assert isinstance(batch.max_seqlen, int)
        assert batch.max_seqlen == max(row["length"] for row in rows(batch))


def test_positions_count_from_the_sequence_or_from_each_piece():
    for by_sequence, by_piece in zip(packed("sequence"), packed("piece")):
        assert torch.equal(by_sequence.data, by_piece.data)
        for row in rows(by_sequence):
            place = (row["block"], slice(row["block_offset"], row["block_offset"] + row["length"]))
            steps = torch.arange(row["length"])
            assert torch.equal(by_sequence.position_ids[place], row["offset"] + steps)
            assert torch.equal(by_piece.position_ids[place], steps)
        assert by_piece.positions == pickle.loads(pickle.dumps(by_piece)).positions == "piece"
    with pytest.raises(ValueError, match='positions = \'token\': expected "sequence" or "piece"'):
        bload.BlockDataset(Numbered(LENGTHS), T_MAX, positions="token")
    with pytest.raises(RuntimeError, match='positions = "token": expected'):
        torch.ops.bload.batch_tables(packed()[0].table, 3, T_MAX, False, 0, "token")


def test_hf_kwargs_equal_transformers_own_collator_on_the_same_sequences():
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_flash_attention_utils import prepare_fa_kwargs_from_position_ids

    collator = transformers.DataCollatorWithFlattening(
        return_flash_attn_kwargs=True, return_seq_idx=True
    )
    for positions in ("sequence", "piece"):
        for batch in packed(positions):
            tokens = (batch.data[..., 0] * 100 + batch.data[..., 1]).long()  # a token per step
            ours = batch.hf_kwargs(input_ids=tokens)
            pieces = [
                {
                    "input_ids": tokens[
                        r["block"], r["block_offset"] : r["block_offset"] + r["length"]
                    ]
                }
                for r in rows(batch)
            ]
            theirs = collator(pieces, return_tensors="pt")
            # and use_cache=False, without which a model's eager and SDPA paths ignore the packing
            assert set(ours) == set(theirs) | {"use_cache"} and ours["use_cache"] is False
            for key, value in theirs.items():
                if isinstance(value, int):
                    assert type(ours[key]) is int and ours[key] == value, key
                else:
                    assert ours[key].dtype == value.dtype and torch.equal(ours[key], value), key
            (cu_q, cu_k), (max_q, max_k) = prepare_fa_kwargs_from_position_ids(ours["position_ids"])
            assert torch.equal(cu_q.int(), ours["cu_seq_lens_q"]) and max_q == ours["max_length_q"]


def document_mask(batch, causal):
    ids = batch.document_ids

    def mask_mod(b, h, q, kv):
        same = ids[b, q] == ids[b, kv]
        return same & (q >= kv) if causal else same

    return mask_mod


def dense(counts, indices, tiles):
    """[blocks, heads, tiles, tiles] bool from a count-and-indices table."""
    out = torch.zeros(*counts.shape, tiles, dtype=torch.bool)
    for index in torch.cartesian_prod(*[torch.arange(n) for n in counts.shape]).tolist():
        out[tuple(index)][indices[tuple(index)][: counts[tuple(index)]].long()] = True
    return out


@pytest.mark.parametrize("block_size", [8, 16, 128])
@pytest.mark.parametrize("causal", [True, False])
def test_block_mask_equals_create_block_mask_of_the_document_mask(causal, block_size):
    for batch in packed():
        ours = batch.block_mask(causal=causal, block_size=block_size)
        theirs = create_block_mask(
            document_mask(batch, causal),
            batch.blocks,
            None,
            T_MAX,
            T_MAX,
            device="cpu",
            BLOCK_SIZE=block_size,
        )
        assert isinstance(ours, BlockMask)
        assert torch.equal(ours.to_dense(), theirs.to_dense())
        tiles = ours.kv_indices.shape[-1]
        for counts, indices in (
            ("kv_num_blocks", "kv_indices"),
            ("full_kv_num_blocks", "full_kv_indices"),
        ):
            mine = dense(getattr(ours, counts), getattr(ours, indices), tiles)
            assert torch.equal(
                mine, dense(getattr(theirs, counts), getattr(theirs, indices), tiles)
            ), counts
        # The dense operator is the same mask, step by step.
        steps = torch.arange(T_MAX)
        mask_mod = document_mask(batch, causal)
        expected = torch.stack(
            [mask_mod(b, 0, steps[:, None], steps[None]) for b in range(batch.blocks)]
        )
        assert torch.equal(batch.attention_mask(causal), expected)


def test_flex_attention_with_the_block_mask_equals_it_with_create_block_mask():
    batch = packed()[0]
    generator = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(batch.blocks, 2, T_MAX, 8, generator=generator, dtype=torch.float64)
        for _ in range(3)
    )
    ours = flex_attention(q, k, v, block_mask=batch.block_mask(block_size=16))
    theirs = flex_attention(
        q,
        k,
        v,
        block_mask=create_block_mask(
            document_mask(batch, True),
            batch.blocks,
            None,
            T_MAX,
            T_MAX,
            device="cpu",
            BLOCK_SIZE=16,
        ),
    )
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=batch.attention_mask().unsqueeze(1)
    )
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12)
    torch.testing.assert_close(ours, sdpa, rtol=0, atol=1e-12)


class MasksInWorkers(torch.utils.data.Dataset):
    """Returns each batch's BlockMask, made in the worker that packed it."""

    def __init__(self):
        self.inner = bload.BlockDataset(Numbered(LENGTHS), T_MAX)

    def __len__(self):
        return len(self.inner)

    def __getitems__(self, request):
        batch = self.inner.__getitems__(request)
        return batch.table, batch.block_mask(block_size=16)


def test_block_mask_is_made_in_a_worker_and_moves_with_to():
    sampler = bload.BlockSampler(LENGTHS, T_MAX, 3, split=True)
    loader = torch.utils.data.DataLoader(
        MasksInWorkers(), batch_sampler=sampler, collate_fn=lambda x: x, num_workers=2
    )
    made_here = packed()
    for (table, mask), batch in zip(loader, made_here):
        assert torch.equal(table, batch.table)
        assert torch.equal(mask.to_dense(), batch.block_mask(block_size=16).to_dense())
        moved = mask.to("meta")
        assert (
            moved.kv_indices.device.type == "meta"
            and moved.mask_mod.document_ids.device.type == "meta"
        )
    assert len(made_here) == len(sampler)


def test_attention_mask_and_kv_blocks_pass_opcheck_and_name_bad_arguments():
    batch = packed()[0]
    for causal in (True, False):
        torch.library.opcheck(
            torch.ops.bload.attention_mask.default, (batch.table, batch.blocks, T_MAX, causal)
        )
        torch.library.opcheck(
            torch.ops.bload.kv_blocks.default, (batch.table, batch.blocks, T_MAX, 16, causal)
        )
    with pytest.raises(RuntimeError, match="block_size = 0: expected at least 1 step"):
        bload.ops.kv_blocks(batch.table, batch.blocks, T_MAX, 0)
    # A tile past t_max is one tile (its count overflowed: an internal message).
    one_tile = bload.ops.kv_blocks(batch.table, batch.blocks, T_MAX, 2**63 - 1)
    assert torch.equal(one_tile[0], bload.ops.kv_blocks(batch.table, batch.blocks, T_MAX, T_MAX)[0])
    with pytest.raises(RuntimeError, match=r"table\[0, length\]"):
        bad = batch.table.clone()
        bad[0, COLUMN["length"]] = 0
        bload.ops.attention_mask(bad, batch.blocks, T_MAX)
    assert bload.ops.max_seqlen(torch.empty(0, 6, dtype=torch.long), 2, T_MAX) == 0
    # The operators take None and 0 as False: a mask asked for with causal=None would let every
    # step see the steps after it.
    for causal in (None, 0, 1, "yes"):
        with pytest.raises(TypeError, match=f"causal = {causal!r}: expected True or False"):
            batch.attention_mask(causal=causal)
        with pytest.raises(TypeError, match=f"causal = {causal!r}: expected True or False"):
            batch.block_mask(causal=causal)
