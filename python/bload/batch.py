"""PackedBatch: one packed batch of one rank, made from the core's one declaration of the batch
(torch.ops.bload.batch_fields(), the Rust core's BatchField), as C++'s bload::PackedBatch and
bload::tch::PackedBatch are.

A batch holds what a loader reads and plans: `data`, `target` and the block `table` (and the
batch's shape, and for lanes whether its rows carry state and the lane of its first row). Every
other tensor field (reset, valid, ends, carry, lanes, segment_ids, position_ids, cu_seqlens, indices,
state_in, state_out, document_ids, cu_seqlens_padded) is written from the table by one operator,
torch.ops.bload.batch_tables, the first time one of them is read, on the device the batch was
moved to. So a batch crosses from a DataLoader worker as
three tensors, and a CUDA user moves the small table's results, not seven [blocks, t_max]
tensors made on the host. max_seqlen, a Python int, is read from the host table when the batch is
made and travels with it.
"""

import torch

from bload import _library, attention
from bload._device import host_to_device
from bload.block_batch import table_from_pickle, table_to_pickle
from bload.fields import BATCH_FIELDS, TABLE_FIELDS

_library.load()

__all__ = ["PackedBatch", "BATCH_FIELDS", "TABLE_FIELDS"]

Tensor = torch.Tensor


def _map(value, function):
    if isinstance(value, dict):
        return {key: function(item) for key, item in value.items()}
    return function(value)


def _doc():
    lines = ["One packed batch of one rank; per-step tensors are [blocks, t_max, ...].", ""]
    for name, (dtype, shape, doc) in BATCH_FIELDS.items():
        kind = (
            "the dataset's dtype"
            if dtype == "loaded"
            else "a Python int:"
            if shape == "int"
            else dtype
        )
        lines.append(f"{name}: {kind} {shape}, {doc}.")
    lines += [
        "",
        "data and target are dicts of such tensors where the dataset's items were. The table stays",
        "on the CPU. The other fields are made from it on first use, all at once, on the batch's",
        "device (see to()).",
    ]
    return "\n".join(lines)


class PackedBatch:
    __doc__ = _doc()
    __slots__ = (
        "data",
        "target",
        "table",
        "blocks",
        "t_max",
        "carries_state",
        "first_lane",
        "device",
        "positions",
        "max_seqlen",
        "global_batch",
        "_tables",
    )

    def __init__(
        self,
        data,
        target,
        table,
        blocks,
        t_max,
        *,
        carries_state=False,
        first_lane=0,
        device=None,
        positions="sequence",
        max_seqlen=None,
        global_batch=None,
    ):
        self.data, self.target, self.table = data, target, table
        self.blocks, self.t_max = blocks, t_max
        #: What position_ids count from: "sequence" or "piece" (see BlockDataset).
        self.positions = positions
        #: The longest piece's steps, a Python int from the (host) table: made with the batch.
        self.max_seqlen = (
            torch.ops.bload.max_seqlen(table, blocks, t_max) if max_seqlen is None else max_seqlen
        )
        #: Whether each row carries its state from the previous batch (policy "lanes").
        self.carries_state, self.first_lane = carries_state, first_lane
        #: Where the fields made from the table go: None for the CPU.
        self.device = device
        #: The global batch (every rank's batch of this index), from the plan: (valid steps,
        #: pieces, loss_scale, shifted_loss_scale), or None for a batch not made from a
        #: BlockSampler's plan.
        self.global_batch = None if global_batch is None else tuple(global_batch)
        self._tables = None

    def tables(self):
        """Every field written from the table, by name: made by one batch_tables call the first
        time (reading any of them calls this), then kept."""
        if self._tables is None:
            made = torch.ops.bload.batch_tables(
                self.table,
                self.blocks,
                self.t_max,
                self.carries_state,
                self.first_lane,
                self.positions,
            )
            if self.device is not None:
                made = [host_to_device(tensor, self.device) for tensor in made]
            self._tables = dict(zip(TABLE_FIELDS, made))
        return self._tables

    def _options(self):
        return {
            "carries_state": self.carries_state,
            "first_lane": self.first_lane,
            "device": self.device,
            "positions": self.positions,
            "max_seqlen": self.max_seqlen,
            "global_batch": self.global_batch,
        }

    @property
    def global_valid(self):
        """Real steps of the global batch, every rank's batch of this index together (an int
        from the plan; None for a batch not made from a BlockSampler's plan)."""
        return None if self.global_batch is None else self.global_batch[0]

    @property
    def global_pieces(self):
        """Pieces of the global batch over every rank: the steps a causal LM's shifted labels
        (bload.causal_labels) skip. None as for global_valid."""
        return None if self.global_batch is None else self.global_batch[1]

    def loss_scale(self, shifted=False):
        """What this rank's summed loss is multiplied by so that, once DDP averages the ranks'
        gradients, they are the gradients of the token mean over the whole global batch, with no
        collective of its own: world_size / global_valid, or with `shifted` (a causal LM's labels
        from bload.causal_labels, which skip each piece's first step) world_size /
        (global_valid - global_pieces). 0.0 where the global batch has no target (every rank's
        sum is 0 too). From the core's plan, as C++'s PackedBatch::loss_scale.

            loss = F.cross_entropy(logits[batch.valid], target[batch.valid], reduction="sum")
            (loss * batch.loss_scale()).backward()"""
        if self.global_batch is None:
            raise ValueError(
                "loss_scale(): this batch has no global batch counts: expected a batch made by "
                "bload.BlockDataset from a bload.BlockSampler's batch (the plan knows them)"
            )
        return self.global_batch[3] if shifted else self.global_batch[2]

    def block_mask(self, causal=True, block_size=128):
        """flex_attention's BlockMask of the batch's documents (its pieces, and each run of padding
        alone), made from kv-block tables the core writes from the table: no [t_max, t_max] mask,
        nothing compiled; works in DataLoader workers and moves with .to(device). See
        bload.attention.block_mask."""
        return attention.block_mask(self, causal, block_size)

    def attention_mask(self, causal=True):
        """bool [blocks, t_max, t_max], the same mask dense (SDPA: .unsqueeze(1)), on the batch's
        device."""
        attention.check_causal(causal)
        mask = torch.ops.bload.attention_mask(self.table, self.blocks, self.t_max, causal)
        return mask if self.device is None else host_to_device(mask, self.device)

    def hf_kwargs(self, input_ids=None, labels=None, separator_id=-100):
        """The keys and layout of transformers' DataCollatorWithFlattening for the batch's pieces
        (position_ids from 0 at each piece, seq_idx, cu_seq_lens_q/k, max_length_q/k; with
        input_ids, also input_ids and labels). See bload.attention.hf_kwargs."""
        return attention.hf_kwargs(self, input_ids, labels, separator_id)

    def to(self, device, non_blocking=False):
        """The batch with data and target on `device`, and the fields made from the table made
        there (moved, where they were made already). The table stays on the CPU, where the
        operators read it."""
        moved = PackedBatch(
            _map(self.data, lambda tensor: tensor.to(device, non_blocking=non_blocking)),
            _map(self.target, lambda tensor: tensor.to(device, non_blocking=non_blocking)),
            self.table,
            self.blocks,
            self.t_max,
            **{**self._options(), "device": torch.device(device)},
        )
        if self._tables is not None:
            moved._tables = {
                name: tensor.to(device, non_blocking=non_blocking)
                for name, tensor in self._tables.items()
            }
        return moved

    def pin_memory(self, device=None):
        """The batch in pinned memory: DataLoader(pin_memory=True) calls it."""
        del device  # pinned for the current accelerator, as torch.Tensor.pin_memory() does
        pinned = PackedBatch(
            _map(self.data, Tensor.pin_memory),
            _map(self.target, Tensor.pin_memory),
            self.table,
            self.blocks,
            self.t_max,
            **self._options(),
        )
        if self._tables is not None:
            pinned._tables = {name: tensor.pin_memory() for name, tensor in self._tables.items()}
        return pinned

    # Pickled (sent from a worker) as what a loader read and planned: the tables are made where
    # the batch is used.
    def __reduce__(self):
        return (
            _rebuild,
            (
                self.data,
                self.target,
                table_to_pickle(self.table),
                self.blocks,
                self.t_max,
                self._options(),
            ),
        )

    def __getitem__(self, key):
        raise TypeError(
            f"PackedBatch[{key!r}]: a bload batch is one packed batch, not a list of samples; it reached a "
            "collate function that indexes it: pass collate_fn=bload.collate to the DataLoader"
        )

    def __repr__(self):
        shape = _map(self.data, lambda tensor: list(tensor.shape))
        return f"PackedBatch(data={shape}, pieces={len(self.table)}, blocks={self.blocks}, t_max={self.t_max})"


def _rebuild(data, target, table, blocks, t_max, options):
    return PackedBatch(data, target, table_from_pickle(table), blocks, t_max, **options)


def _table_field(name):
    dtype, shape, doc = BATCH_FIELDS[name]
    return property(
        lambda batch: batch.tables()[name],
        doc=f"{dtype} {shape}: {doc} (made from the table on first use)",
    )


for _name in TABLE_FIELDS:
    setattr(PackedBatch, _name, _table_field(_name))
del _name
