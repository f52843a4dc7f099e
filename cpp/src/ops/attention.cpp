// torch.ops.bload's attention operators: max_seqlen, attention_mask (a dense block-diagonal mask
// for SDPA and TorchScript) and kv_blocks (flex_attention's kv-block tables), each made by the
// Rust core from the block table on the host, then moved to the table's device. Schemas, kernels
// (device-generic, Meta) and the Autograd fallthrough live here, as in batch_tables.cpp.

#include <torch/library.h>

#include <tuple>
#include <vector>

#include "../rust_bridge.h"
#include "bload/ops.h"
#include "checks.h"
#include "typed_op.h"

namespace bload {
namespace {

using at::Tensor;
using ops::typed_op;

int64_t max_seqlen_kernel(const Tensor& table, int64_t blocks, int64_t t_max) {
  ops::check_defined(table, "table");
  const auto host = ops::host_table(table);
  return rethrowing([&] { return ffi::max_seqlen(elements<int64_t>(host), blocks, t_max); });
}

// The tiles of `t_max` steps; block_size checked first, as the core words it.
int64_t tiles_of(int64_t t_max, int64_t block_size) {
  TORCH_CHECK(block_size >= 1, "block_size = ", block_size, ": expected at least 1 step");
  // (t_max + block_size - 1) / block_size would overflow for a block_size near INT64_MAX.
  return t_max / block_size + (t_max % block_size != 0 ? 1 : 0);
}

Tensor on_device_of(Tensor tensor, const Tensor& table) {
  return table.is_cpu() ? tensor : tensor.to(table.device());
}

Tensor attention_mask_kernel(const Tensor& table, int64_t blocks, int64_t t_max, bool causal) {
  const auto host = ops::host_table(table);
  ops::check_batch_shape(blocks, t_max);
  auto out = at::empty({blocks, t_max, t_max}, at::kBool);
  rethrowing([&] {
    ffi::write_attention_mask(elements<int64_t>(host), blocks, t_max, causal,
                              mutable_elements<bool>(out));
  });
  return on_device_of(out, table);
}

Tensor attention_mask_meta(const Tensor& table, int64_t blocks, int64_t t_max, bool /*causal*/) {
  ops::check_table_layout(table);
  ops::check_batch_shape(blocks, t_max);
  return at::empty({blocks, t_max, t_max}, table.options().dtype(at::kBool));
}

std::vector<Tensor> kv_blocks_kernel(const Tensor& table, int64_t blocks, int64_t t_max,
                                     int64_t block_size, bool causal) {
  const auto host = ops::host_table(table);
  ops::check_batch_shape(blocks, t_max);
  const auto tiles = tiles_of(t_max, block_size);
  std::vector<Tensor> out{
      at::empty({blocks, 1, tiles}, at::kInt), at::empty({blocks, 1, tiles, tiles}, at::kInt),
      at::empty({blocks, 1, tiles}, at::kInt), at::empty({blocks, 1, tiles, tiles}, at::kInt)};
  rethrowing([&] {
    ffi::write_kv_blocks(elements<int64_t>(host), blocks, t_max, block_size, causal,
                         mutable_elements<int32_t>(out[0]), mutable_elements<int32_t>(out[1]),
                         mutable_elements<int32_t>(out[2]), mutable_elements<int32_t>(out[3]));
  });
  for (auto& tensor : out) tensor = on_device_of(tensor, table);
  return out;
}

std::vector<Tensor> kv_blocks_meta(const Tensor& table, int64_t blocks, int64_t t_max,
                                   int64_t block_size, bool /*causal*/) {
  ops::check_table_layout(table);
  ops::check_batch_shape(blocks, t_max);
  const auto tiles = tiles_of(t_max, block_size);
  const auto options = table.options().dtype(at::kInt);
  return {at::empty({blocks, 1, tiles}, options), at::empty({blocks, 1, tiles, tiles}, options),
          at::empty({blocks, 1, tiles}, options), at::empty({blocks, 1, tiles, tiles}, options)};
}

std::tuple<Tensor, Tensor, Tensor, Tensor> as_tuple(std::vector<Tensor> out) {
  return {out[0], out[1], out[2], out[3]};
}

}  // namespace

int64_t max_seqlen(const Tensor& table, int64_t blocks, int64_t t_max) {
  return max_seqlen_kernel(table, blocks, t_max);
}

Tensor attention_mask(const Tensor& table, int64_t blocks, int64_t t_max, bool causal) {
  static auto op = typed_op<Tensor(const Tensor&, int64_t, int64_t, bool)>("bload::attention_mask");
  ops::check_defined(table, "table");
  return op.call(table, blocks, t_max, causal);
}

std::vector<Tensor> kv_blocks(const Tensor& table, int64_t blocks, int64_t t_max,
                              int64_t block_size, bool causal) {
  using Tiles = std::tuple<Tensor, Tensor, Tensor, Tensor>;
  static auto op =
      typed_op<Tiles(const Tensor&, int64_t, int64_t, int64_t, bool)>("bload::kv_blocks");
  ops::check_defined(table, "table");
  auto [counts, indices, full_counts, full_indices] =
      op.call(table, blocks, t_max, block_size, causal);
  return {counts, indices, full_counts, full_indices};
}

TORCH_LIBRARY_FRAGMENT(bload, m) {
  // A host integer from the table: one kernel for every device (the table is read where it is).
  m.def("max_seqlen(Tensor table, int blocks, int t_max) -> int", &max_seqlen_kernel);
  m.def("attention_mask(Tensor table, int blocks, int t_max, bool causal=True) -> Tensor");
  m.def(
      "kv_blocks(Tensor table, int blocks, int t_max, int block_size=128, bool causal=True) "
      "-> (Tensor kv_num_blocks, Tensor kv_indices, Tensor full_kv_num_blocks, "
      "Tensor full_kv_indices)");
}

TORCH_LIBRARY_IMPL(bload, CompositeExplicitAutograd, m) {
  m.impl("attention_mask", &attention_mask_kernel);
  m.impl("kv_blocks",
         [](const Tensor& table, int64_t blocks, int64_t t_max, int64_t block_size, bool causal) {
           return as_tuple(kv_blocks_kernel(table, blocks, t_max, block_size, causal));
         });
}

TORCH_LIBRARY_IMPL(bload, Meta, m) {
  m.impl("attention_mask", &attention_mask_meta);
  m.impl("kv_blocks",
         [](const Tensor& table, int64_t blocks, int64_t t_max, int64_t block_size, bool causal) {
           return as_tuple(kv_blocks_meta(table, blocks, t_max, block_size, causal));
         });
}

// Masks are not differentiable: autograd passes the call on.
TORCH_LIBRARY_IMPL(bload, Autograd, m) {
  m.impl("attention_mask", torch::CppFunction::makeFallthrough());
  m.impl("kv_blocks", torch::CppFunction::makeFallthrough());
}

}  // namespace bload
