// torch.ops.bload's Meta kernels: output shapes and dtypes without reading a value, for
// torch.compile and torch.export, after the same checks as far as layouts and shapes go.
// `unpack` has none: its output shapes are the table's values.

#include <torch/library.h>

#include "checks.h"

namespace bload::ops {
namespace {

using at::Tensor;

// The Meta key is chosen when any argument is on meta: a table on meta with real sequences (or
// the reverse for pack_backward's grad) would get an output of uninitialised real memory.
void check_on_meta(const Tensor& tensor, const char* name) {
  TORCH_CHECK(tensor.is_meta(), name,
              ": expected a meta tensor, like the other meta arguments, "
              "got one on ",
              tensor.device(), " (move every tensor argument to one device)");
}

Tensor pack(at::TensorList sequences, const Tensor& table, int64_t blocks, int64_t t_max,
            const at::Scalar&) {
  check_table_layout(table);
  check_batch_shape(blocks, t_max);
  check_sequences(sequences, table.sym_size(0));
  check_on_meta(sequences[0], "sequences[0]");
  return at::empty_symint(packed_shape(sequences[0], blocks, t_max), sequences[0].options());
}

void pack_into(Tensor& out, at::TensorList sequences, const Tensor& table, const at::Scalar&) {
  check_table_layout(table);
  check_pack_into_layout(out, sequences, table.sym_size(0));
  if (!sequences.empty()) check_on_meta(sequences[0], "sequences[0]");
}

std::vector<Tensor> pack_backward(const Tensor& grad, const Tensor& table,
                                  c10::SymIntArrayRef steps) {
  check_table_layout(table);
  check_on_meta(grad, "grad");
  check_gradient_layout(grad, table.sym_size(0), steps.size());
  std::vector<Tensor> grads;
  for (const auto& length : steps) {
    std::vector<c10::SymInt> shape{length};
    for (const auto& size : grad.sym_sizes().slice(2)) shape.push_back(size);
    grads.push_back(at::empty_symint(shape, grad.options()));
  }
  return grads;
}

}  // namespace

TORCH_LIBRARY_IMPL(bload, Meta, m) {
  m.impl("pack", &pack);
  m.impl("pack_into", &pack_into);
  m.impl("pack_backward", &pack_backward);
}

}  // namespace bload::ops
