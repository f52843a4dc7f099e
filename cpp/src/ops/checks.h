#pragma once
// What the kernels of torch.ops.bload share, whatever their dispatch key: the argument checks
// (those that need no tensor values run in the Meta kernels too), the block table brought to
// the host and checked by the Rust core, and where a checked row's piece lies.

#include <ATen/ATen.h>

#include <vector>

#include "bload/planner.h"

namespace bload::ops {

// The table's dtype and shape: int64 [pieces, kTableColumns].
void check_table_layout(const at::Tensor& table);
// blocks and t_max of a batch (the core's check: at least 1 each, their product within int32).
void check_batch_shape(int64_t blocks, int64_t t_max);
// A contiguous host copy of `table` (the tensor itself when it is one), layout checked.
at::Tensor host_table(const at::Tensor& table);
// The same, with every value checked by the core against a batch of [blocks, t_max].
at::Tensor checked_host_table(const at::Tensor& table, int64_t blocks, int64_t t_max);

// One sequence per table row, each [steps, ...] with the first one's trailing shape, dtype and
// device. Symbolic sizes allowed: the Meta kernel checks the same.
void check_sequences(at::TensorList sequences, const c10::SymInt& rows);
// pack_backward's grad ([blocks, t_max, ...]) and one length in `steps` per table row.
void check_gradient_layout(const at::Tensor& grad, const c10::SymInt& rows, size_t steps);
// `pack`'s output shape: [blocks, t_max] and the sequences' trailing shape.
std::vector<c10::SymInt> packed_shape(const at::Tensor& first, c10::SymInt blocks,
                                      c10::SymInt t_max);

// Where a checked table row's piece lies: its steps in a packed [blocks, t_max, ...] tensor,
// and in its whole sequence [T_i, ...]. Both are views.
template <typename Row>
at::Tensor steps_in_block(const at::Tensor& packed, const Row& piece) {
  return packed.select(0, piece[kBlock]).narrow(0, piece[kBlockOffset], piece[kLength]);
}

template <typename Row>
at::Tensor steps_in_sequence(const at::Tensor& sequence, const Row& piece) {
  return sequence.narrow(0, piece[kOffset], piece[kLength]);
}

// Packs into `out` ([blocks, t_max, ...], allocated): pieces copied in, padding elsewhere.
// `host` is a checked host table and `sequences` are checked; defined with the device kernels.
void fill_packed(at::Tensor& out, at::TensorList sequences, const at::Tensor& host,
                 const at::Scalar& padding_value);

// pack's backward through the dispatcher (an operator of its own, so AOT autograd traces it).
std::vector<at::Tensor> call_pack_backward(const at::Tensor& grad, const at::Tensor& table,
                                           c10::SymIntArrayRef steps);

}  // namespace bload::ops
