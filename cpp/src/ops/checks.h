#pragma once
// What the kernels of torch.ops.bload share, whatever their dispatch key: the argument checks
// (those that need no tensor values run in the Meta kernels too), the block table brought to
// the host and checked by the Rust core, and where a checked row's piece lies.

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "bload/export.h"
#include "bload/planner.h"

namespace bload::ops {

// `tensor`, an argument called `name`, is defined (a C++ caller can pass an undefined one, which
// has no dtype or shape to report).
void check_defined(const at::Tensor& tensor, const char* name);
// `tensor`'s values can be read: a meta tensor has none (its shape and dtype alone are checked
// where a kernel needs no value).
void check_has_values(const at::Tensor& tensor, const char* name);
// `lengths` (named `name`: a planner's lengths, or a source's) is a dense 1-d integer tensor
// with values, and a uint64 one holds none past 2^32 - 1 (named by its own value).
void check_lengths(const at::Tensor& lengths, const std::string& name);
// The table's dtype and shape: int64 [pieces, kTableColumns].
void check_table_layout(const at::Tensor& table);
// The padding written into a tensor of `dtype` is held exactly by it: an integer in its range
// for an integer dtype, 0 or 1 for bool, a value within the finite range (or an infinity or NaN)
// for a floating dtype. Otherwise an error naming `name` (the option or argument) and the value:
// torch's own conversion would round 1.5 to 1 in silence, or report an overflow without a name.
void check_padding(const at::Scalar& padding, at::ScalarType dtype, const char* name);
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

// Where a checked table row's piece starts in the tensor given for it: a sequence is given whole
// ([sequence_length, ...], the piece at its offset) or as the piece alone ([length, ...], from
// step 0, as a dataset that reads ranges returns it). Any other step count is an error naming
// `argument`[row].
template <typename Row>
int64_t piece_start(const Row& piece, int64_t steps, const char* argument, int64_t row) {
  if (steps == piece[kSequenceLength]) return piece[kOffset];
  TORCH_CHECK(steps == piece[kLength], argument, "[", row, "] has ", steps, " steps: expected ",
              piece[kSequenceLength], ", the length of sequence ", piece[kSequence],
              " in table row ", row, " (or ", piece[kLength], ", its piece alone)");
  return 0;
}

// Where a checked table row's piece lies: its first step among the batch's blocks * t_max, and
// its steps in a packed [blocks, t_max, ...] tensor (a view).
template <typename Row>
int64_t first_step(const Row& piece, int64_t t_max) {
  return piece[kBlock] * t_max + piece[kBlockOffset];
}

template <typename Row>
at::Tensor steps_in_block(const at::Tensor& packed, const Row& piece) {
  return packed.select(0, piece[kBlock]).narrow(0, piece[kBlockOffset], piece[kLength]);
}

// `pack` and `pack_into` write `out` ([blocks, t_max, ...], allocated, on the sequences'
// device): pieces copied in, padding elsewhere. `host` is a checked host table and `sequences`
// are checked. The CPU kernel copies bytes (cpu_kernels.cpp); this one, for every other device,
// gathers every step with one index_select, so its work on the device does not grow with the
// pieces (device_kernels.cpp; exported so that a test can run it on CPU tensors).
BLOAD_API void pack_by_gather(at::Tensor& out, at::TensorList sequences, const at::Tensor& host,
                              const at::Scalar& padding_value);
// pack_into's checks of `out` against the sequences: [blocks, t_max, ...] of their trailing shape,
// dtype and device.
void check_pack_into(const at::Tensor& out, const at::Tensor& first);
// pack_into's sequences against the table's rows and out's shape and dtype; no sequence (a
// table of no row) leaves out's dtype for the padding.
void check_pack_into_layout(const at::Tensor& out, at::TensorList sequences,
                            const c10::SymInt& rows);

// The checks of pack's and pack_into's kernels, whatever the device: `sequences` against the
// table, the table (brought to the host) against the batch shape, which is `out`'s for pack_into.
// The checked host table.
// The padding is checked against the sequences' dtype (check_padding, named padding_value).
at::Tensor checked_pack_inputs(at::TensorList sequences, const at::Tensor& table, int64_t blocks,
                               int64_t t_max, const at::Scalar& padding_value);
at::Tensor checked_pack_into_inputs(const at::Tensor& out, at::TensorList sequences,
                                    const at::Tensor& table, const at::Scalar& padding_value);

// The names of batch_tables' outputs, in its order (the core's fields written from the table).
const std::vector<std::string>& batch_table_names();

// batch_tables' kernel on a host table (layout checked), without the dispatcher: what bload's own
// dataset calls for every batch (its tables are CPU tensors, made where it packs).
std::vector<at::Tensor> batch_tables_on_host(const at::Tensor& host, int64_t blocks, int64_t t_max,
                                             bool carry, int64_t first_lane,
                                             const std::string& positions = "sequence");

// pack's backward through the dispatcher (an operator of its own, so AOT autograd traces it).
// pack_into through the dispatcher from a list of the caller's tensors, without copying the
// list (each copy of a tensor is an atomic reference count, a measurable share of a small batch).
void call_pack_into(at::Tensor& out, at::TensorList sequences, const at::Tensor& table,
                    const at::Scalar& padding_value);

std::vector<at::Tensor> call_pack_backward(const at::Tensor& grad, const at::Tensor& table,
                                           c10::SymIntArrayRef steps);

}  // namespace bload::ops
