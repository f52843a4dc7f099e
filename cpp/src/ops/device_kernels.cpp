// torch.ops.bload's device-generic kernels (CompositeExplicitAutograd): one kernel serves CPU
// and CUDA tensors alike. The block table is small (one row per piece): it is read on the host,
// where the Rust core checks it and writes the per-step tables; results move to the input's
// device.

#include <torch/library.h>

#include "../rust_bridge.h"
#include "checks.h"

namespace bload::ops {

void fill_packed(at::Tensor& out, at::TensorList sequences, const at::Tensor& host,
                 const at::Scalar& padding_value) {
  auto cells = host.accessor<int64_t, 2>();
  out.fill_(padding_value);
  for (int64_t row = 0; row < host.size(0); ++row) {
    const auto& sequence = sequences[row];
    TORCH_CHECK(sequence.size(0) == cells[row][kSequenceLength], "sequences[", row, "] has ",
                sequence.size(0), " steps: expected ", cells[row][kSequenceLength],
                ", the length of sequence ", cells[row][kSequence], " in table row ", row);
    steps_in_block(out, cells[row]).copy_(steps_in_sequence(sequence, cells[row]));
  }
}

namespace {

using at::Tensor;

// A [blocks, t_max] table of T, written by the core's `write` from the host table.
template <typename T, typename Write>
Tensor step_table(const Tensor& table, int64_t blocks, int64_t t_max, Write write) {
  auto host = host_table(table);
  check_batch_shape(blocks, t_max);
  auto out = at::empty({blocks, t_max}, at::CppTypeToScalarType<T>::value);
  rethrowing([&] { write(elements<int64_t>(host), blocks, t_max, mutable_elements<T>(out)); });
  return out.to(table.device());
}

Tensor reset_mask(const Tensor& table, int64_t blocks, int64_t t_max) {
  return step_table<bool>(table, blocks, t_max, ffi::write_reset_mask);
}

Tensor valid_mask(const Tensor& table, int64_t blocks, int64_t t_max) {
  return step_table<bool>(table, blocks, t_max, ffi::write_valid_mask);
}

Tensor segment_ids(const Tensor& table, int64_t blocks, int64_t t_max) {
  return step_table<int32_t>(table, blocks, t_max, ffi::write_segment_ids);
}

Tensor position_ids(const Tensor& table, int64_t blocks, int64_t t_max) {
  return step_table<int64_t>(table, blocks, t_max, ffi::write_position_ids);
}

Tensor cu_seqlens(const Tensor& table) {
  auto host = host_table(table);
  auto out = at::empty({host.size(0) + 1}, at::kInt);
  rethrowing([&] { ffi::write_cu_seqlens(elements<int64_t>(host), mutable_elements<int32_t>(out)); });
  return out.to(table.device());
}

Tensor pack(at::TensorList sequences, const Tensor& table, int64_t blocks, int64_t t_max,
            const at::Scalar& padding_value) {
  auto host = checked_host_table(table, blocks, t_max);
  check_sequences(sequences, host.size(0));
  auto out = at::empty_symint(packed_shape(sequences[0], blocks, t_max), sequences[0].options());
  fill_packed(out, sequences, host, padding_value);
  return out;
}

std::vector<Tensor> unpack(const Tensor& packed, const Tensor& table) {
  TORCH_CHECK(packed.dim() >= 2, "packed: expected a tensor [blocks, t_max, ...], got a ",
              packed.dim(), "-d tensor");
  auto host = checked_host_table(table, packed.size(0), packed.size(1));
  auto cells = host.accessor<int64_t, 2>();
  std::vector<Tensor> pieces;
  pieces.reserve(host.size(0));
  for (int64_t row = 0; row < host.size(0); ++row) {
    pieces.push_back(steps_in_block(packed, cells[row]).clone());
  }
  return pieces;
}

// The gradient of each row's whole sequence, [steps[row], ...], zero outside its piece.
std::vector<Tensor> pack_backward(const Tensor& grad, const Tensor& table,
                                  c10::SymIntArrayRef steps) {
  check_table_layout(table);
  check_gradient_layout(grad, table.sym_size(0), steps.size());
  auto host = checked_host_table(table, grad.size(0), grad.size(1));
  auto cells = host.accessor<int64_t, 2>();
  std::vector<Tensor> grads;
  for (int64_t row = 0; row < host.size(0); ++row) {
    const int64_t length = steps[row].expect_int();
    TORCH_CHECK(length == cells[row][kSequenceLength], "steps[", row, "] = ", length,
                ": expected ", cells[row][kSequenceLength], ", the length of sequence ",
                cells[row][kSequence], " in table row ", row);
    std::vector<int64_t> shape{length};
    for (auto size : grad.sizes().slice(2)) shape.push_back(size);
    auto sequence_grad = at::zeros(shape, grad.options());
    steps_in_sequence(sequence_grad, cells[row]).copy_(steps_in_block(grad, cells[row]));
    grads.push_back(sequence_grad);
  }
  return grads;
}

}  // namespace

TORCH_LIBRARY_IMPL(bload, CompositeExplicitAutograd, m) {
  m.impl("reset_mask", &reset_mask);
  m.impl("valid_mask", &valid_mask);
  m.impl("segment_ids", &segment_ids);
  m.impl("position_ids", &position_ids);
  m.impl("cu_seqlens", &cu_seqlens);
  m.impl("pack", &pack);
  m.impl("unpack", &unpack);
  m.impl("pack_backward", &pack_backward);
}

}  // namespace bload::ops
