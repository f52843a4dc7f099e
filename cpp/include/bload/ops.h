#pragma once
// The torch.ops.bload operators, callable from C++. Each goes through torch's dispatcher, so it
// runs the kernel for its inputs' device (CPU, CUDA, or Meta while tracing). Each is registered
// in the file under cpp/src/ops/ that defines its kernels (docs/architecture.md lists them).
//
// `table` is a block table (see TableColumn, through planner.h): int64 [pieces, 6] on any device,
// pieces sorted by block and offset and not overlapping. `blocks` and `t_max` give the batch's
// shape, [blocks, t_max]; the per-step tables come out on the table's device.

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "bload/export.h"

namespace bload {

// bool [blocks, t_max]: true at the first step of every piece, where a recurrent model resets;
// with `carry` (lanes: each row carries its state from the previous batch), only where a
// sequence starts.
BLOAD_API at::Tensor reset_mask(const at::Tensor& table, int64_t blocks, int64_t t_max,
                                bool carry = false);
// bool [blocks, t_max]: true at the last step of every sequence.
BLOAD_API at::Tensor end_mask(const at::Tensor& table, int64_t blocks, int64_t t_max);
// bool [blocks]: true where the row's first step continues the state it carried from the
// previous batch (lanes); a model keeps that state and zeroes the others'.
BLOAD_API at::Tensor carry_mask(const at::Tensor& table, int64_t blocks, int64_t t_max);
// bool [blocks, t_max]: true on real steps, false on padding.
BLOAD_API at::Tensor valid_mask(const at::Tensor& table, int64_t blocks, int64_t t_max);
// int32 [blocks, t_max]: index of the piece inside its block (0, 1, ...), -1 on padding.
BLOAD_API at::Tensor segment_ids(const at::Tensor& table, int64_t blocks, int64_t t_max);
// int64 [blocks, t_max]: step index inside the sequence, 0 on padding.
BLOAD_API at::Tensor position_ids(const at::Tensor& table, int64_t blocks, int64_t t_max);
// int32 [pieces + 1]: prefix sums of piece lengths from 0, flash-attention's varlen layout for
// the batch with padding removed.
BLOAD_API at::Tensor cu_seqlens(const at::Tensor& table);

// [blocks, t_max, ...]: `sequences[i]` is the whole sequence of the table's row i ([T_i, ...],
// all of one dtype, device and trailing shape) or its piece alone ([length_i, ...], as a dataset
// that reads ranges returns it); the piece is copied in and the rest is `padding_value`. Output
// on the sequences' device. Every output element is written once: on the CPU with plain copies,
// elsewhere with one gather whose work on the device does not grow with the pieces.
BLOAD_API at::Tensor pack(const std::vector<at::Tensor>& sequences, const at::Tensor& table,
                          int64_t blocks, int64_t t_max, const at::Scalar& padding_value = 0);
// The pieces of a packed [blocks, t_max, ...] tensor, one [length, ...] tensor per table row.
BLOAD_API std::vector<at::Tensor> unpack(const at::Tensor& packed, const at::Tensor& table);

// The operator pack_into: what `pack` does, into an `out` tensor the caller allocated ([blocks,
// t_max, ...] on the sequences' device, for example a buffer reused batch after batch, or pinned
// memory): pieces are copied in, every other step is set to `padding_value`.
BLOAD_API void pack_into(at::Tensor& out, const std::vector<at::Tensor>& sequences,
                         const at::Tensor& table, const at::Scalar& padding_value);

// Every table of a packed batch that its block table determines, from one check of the table:
// reset, valid, ends, carry, lanes, segment_ids, position_ids, cu_seqlens, indices, state_in,
// state_out, document_ids, cu_seqlens_padded, in that order (the core's batch declaration; see
// PackedBatch in bload/dataset.h), on the table's device. `carry` as for reset_mask; row j of the
// batch is lane `first_lane + j`; `positions` is "sequence" (position_ids count from the
// sequence's start) or "piece" (from 0 at every piece). What a loader calls once per batch
// instead of one operator per table.
BLOAD_API std::vector<at::Tensor> batch_tables(const at::Tensor& table, int64_t blocks,
                                               int64_t t_max, bool carry = false,
                                               int64_t first_lane = 0,
                                               const std::string& positions = "sequence");

// Attention over a packed batch, whose documents are its pieces and its runs of padding (each
// run a document of its own, so no query row is empty). See docs/attention.md.
//
// The longest piece's steps (0 for a table of no row), read from the table on the host: varlen
// kernels' max_seqlen, with no device tensor read.
BLOAD_API int64_t max_seqlen(const at::Tensor& table, int64_t blocks, int64_t t_max);
// bool [blocks, t_max, t_max]: true where query step q may attend to key step k (same document;
// with `causal`, also k <= q). For SDPA's attn_mask ([blocks, 1, t_max, t_max] after
// unsqueeze(1)) and TorchScript models.
BLOAD_API at::Tensor attention_mask(const at::Tensor& table, int64_t blocks, int64_t t_max,
                                    bool causal = true);
// flex_attention's kv-block tables of the same mask for tiles of `block_size` steps, as
// BlockMask.from_kv_blocks takes them: kv_num_blocks int32 [blocks, 1, tiles], kv_indices int32
// [blocks, 1, tiles, tiles], then full_kv_num_blocks and full_kv_indices (tiles wholly allowed),
// tiles = ceil(t_max / block_size). Made from the table: no [t_max, t_max] mask is made.
BLOAD_API std::vector<at::Tensor> kv_blocks(const at::Tensor& table, int64_t blocks, int64_t t_max,
                                            int64_t block_size = 128, bool causal = true);

// The names of the policies a plan can have, in the core's order (Options::policy takes them).
BLOAD_API std::vector<std::string> policy_names();

}  // namespace bload
