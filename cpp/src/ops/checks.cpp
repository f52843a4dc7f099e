// The argument checks of torch.ops.bload's kernels (see checks.h). The block table's values are
// checked by the Rust core, the one home of its meaning; here only the tensors' layout.

#include "checks.h"

#include "../rust_bridge.h"

namespace bload::ops {

void check_table_layout(const at::Tensor& table) {
  TORCH_CHECK(table.scalar_type() == at::kLong, "table: expected an int64 tensor, got ",
              table.scalar_type());
  TORCH_CHECK(table.dim() == 2 && table.size(1) == kTableColumns,
              "table: expected shape [pieces, ", kTableColumns, "] (",
              c10::Join(", ", ffi::table_column_names()), "), got ", table.sizes());
}

void check_batch_shape(int64_t blocks, int64_t t_max) {
  rethrowing([&] { ffi::check_block_table({}, blocks, t_max); });
}

at::Tensor host_table(const at::Tensor& table) {
  check_table_layout(table);
  return table.to(at::kCPU).contiguous();
}

at::Tensor checked_host_table(const at::Tensor& table, int64_t blocks, int64_t t_max) {
  auto host = host_table(table);
  rethrowing([&] { ffi::check_block_table(elements<int64_t>(host), blocks, t_max); });
  return host;
}

void check_sequences(at::TensorList sequences, const c10::SymInt& rows) {
  TORCH_CHECK(!sequences.empty(),
              "sequences: expected at least one tensor (the output's trailing shape and dtype "
              "come from the first)");
  TORCH_CHECK(rows == static_cast<int64_t>(sequences.size()), "sequences: expected ", rows,
              " tensors, one per table row, got ", sequences.size());
  const auto& first = sequences[0];
  for (size_t i = 0; i < sequences.size(); ++i) {
    const auto& sequence = sequences[i];
    TORCH_CHECK(sequence.dim() >= 1, "sequences[", i, "]: expected a tensor [steps, ...], got a ",
                sequence.dim(), "-d tensor");
    TORCH_CHECK(sequence.sym_sizes().slice(1) == first.sym_sizes().slice(1), "sequences[", i,
                "]: expected shape [steps, ", first.sym_sizes().slice(1),
                "] like sequences[0], got ", sequence.sym_sizes());
    TORCH_CHECK(sequence.scalar_type() == first.scalar_type(), "sequences[", i,
                "]: expected dtype ", first.scalar_type(), " like sequences[0], got ",
                sequence.scalar_type());
    TORCH_CHECK(sequence.device() == first.device(), "sequences[", i, "]: expected device ",
                first.device(), " like sequences[0], got ", sequence.device());
  }
}

void check_gradient_layout(const at::Tensor& grad, const c10::SymInt& rows, size_t steps) {
  TORCH_CHECK(grad.dim() >= 2, "grad: expected a tensor [blocks, t_max, ...], got a ", grad.dim(),
              "-d tensor");
  TORCH_CHECK(rows == static_cast<int64_t>(steps), "steps: expected ", rows,
              " lengths, one per table row, got ", steps);
}

void check_pack_into(const at::Tensor& out, const at::Tensor& first) {
  TORCH_CHECK(out.dim() >= 2 && out.sym_sizes().slice(2) == first.sym_sizes().slice(1),
              "out: expected shape [blocks, t_max, ", first.sym_sizes().slice(1),
              "] (the sequences' trailing shape), got ", out.sym_sizes());
  TORCH_CHECK(out.scalar_type() == first.scalar_type() && out.device() == first.device(),
              "out: expected dtype ", first.scalar_type(), " on ", first.device(),
              " like the sequences, got ", out.scalar_type(), " on ", out.device());
}

at::Tensor checked_pack_inputs(at::TensorList sequences, const at::Tensor& table, int64_t blocks,
                               int64_t t_max) {
  auto host = checked_host_table(table, blocks, t_max);
  check_sequences(sequences, host.size(0));
  return host;
}

at::Tensor checked_pack_into_inputs(const at::Tensor& out, at::TensorList sequences,
                                    const at::Tensor& table) {
  check_sequences(sequences, table.size(0));
  check_pack_into(out, sequences[0]);
  return checked_host_table(table, out.size(0), out.size(1));
}

std::vector<c10::SymInt> packed_shape(const at::Tensor& first, c10::SymInt blocks,
                                      c10::SymInt t_max) {
  std::vector<c10::SymInt> shape{std::move(blocks), std::move(t_max)};
  for (const auto& size : first.sym_sizes().slice(1)) shape.push_back(size);
  return shape;
}

}  // namespace bload::ops
