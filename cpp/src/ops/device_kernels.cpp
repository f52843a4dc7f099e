// torch.ops.bload's device-generic kernels (CompositeExplicitAutograd): one kernel serves CPU
// and CUDA tensors alike. The block table is small (one row per piece): it is read on the host,
// where the Rust core checks it and writes the per-step tables; results move to the input's
// device.

#include <torch/library.h>

#include <numeric>

#include "../rust_bridge.h"
#include "checks.h"

namespace bload::ops {

void pack_by_gather(at::Tensor& out, at::TensorList sequences, const at::Tensor& host,
                    const at::Scalar& padding_value) {
  if (sequences.empty()) {  // a batch of padding only (pack_into of a table of no row)
    out.fill_(padding_value);
    return;
  }
  const auto& first = sequences[0];
  // The sources, end to end: every sequence as given, then one step of padding.
  std::vector<at::Tensor> sources(sequences.begin(), sequences.end());
  sources.push_back(at::full_symint(packed_shape(first, 1, 1), padding_value, first.options())[0]);
  int64_t source_steps = 0;
  for (const auto& sequence : sequences) source_steps += sequence.size(0);
  // Which source step every output step takes: the padding step unless a piece lies there.
  const int64_t t_max = out.size(1);
  auto index = at::full({out.size(0) * t_max}, source_steps, at::kLong);
  auto* taken = index.mutable_data_ptr<int64_t>();
  auto cells = host.accessor<int64_t, 2>();
  int64_t sequence_start = 0;
  for (int64_t row = 0; row < host.size(0); ++row) {
    const auto piece = cells[row];
    const int64_t start = piece_start(piece, sequences[row].size(0), "sequences", row);
    std::iota(taken + first_step(piece, t_max), taken + first_step(piece, t_max) + piece[kLength],
              sequence_start + start);
    sequence_start += sequences[row].size(0);
  }
  auto steps = at::cat(sources, 0).index_select(0, index.to(first.device()));
  out.copy_(steps.view(out.sizes()));
}

namespace {

using at::Tensor;

Tensor pack(at::TensorList sequences, const Tensor& table, int64_t blocks, int64_t t_max,
            const at::Scalar& padding_value) {
  auto host = checked_pack_inputs(sequences, table, blocks, t_max, padding_value);
  auto out = at::empty_symint(packed_shape(sequences[0], blocks, t_max), sequences[0].options());
  pack_by_gather(out, sequences, host, padding_value);
  return out;
}

void pack_into(Tensor& out, at::TensorList sequences, const Tensor& table,
               const at::Scalar& padding_value) {
  const auto host = checked_pack_into_inputs(out, sequences, table, padding_value);
  pack_by_gather(out, sequences, host, padding_value);
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

// The gradient of each row's sequence as given to pack, [steps[row], ...] (the whole sequence,
// zero outside its piece, or the piece alone).
std::vector<Tensor> pack_backward(const Tensor& grad, const Tensor& table,
                                  c10::SymIntArrayRef steps) {
  check_table_layout(table);
  check_gradient_layout(grad, table.sym_size(0), steps.size());
  auto host = checked_host_table(table, grad.size(0), grad.size(1));
  auto cells = host.accessor<int64_t, 2>();
  std::vector<Tensor> grads;
  for (int64_t row = 0; row < host.size(0); ++row) {
    const auto piece = cells[row];
    const int64_t length = steps[row].expect_int();
    const int64_t start = piece_start(piece, length, "steps", row);
    std::vector<int64_t> shape{length};
    for (auto size : grad.sizes().slice(2)) shape.push_back(size);
    auto sequence_grad = at::zeros(shape, grad.options());
    sequence_grad.narrow(0, start, piece[kLength]).copy_(steps_in_block(grad, piece));
    grads.push_back(sequence_grad);
  }
  return grads;
}

}  // namespace

TORCH_LIBRARY_IMPL(bload, CompositeExplicitAutograd, m) {
  m.impl("pack", &pack);
  m.impl("pack_into", &pack_into);
  m.impl("unpack", &unpack);
  m.impl("pack_backward", &pack_backward);
}

}  // namespace bload::ops
