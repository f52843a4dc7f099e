// The per-table operators of torch.ops.bload: reset_mask, end_mask, carry_mask, valid_mask,
// segment_ids, position_ids and cu_seqlens, each one table of a batch written by the Rust core
// from its block table (TorchScript models that want one table call these; a loader makes every
// table at once with batch_tables). Each operator's schema, C++ entry point, kernels (device-
// generic and Meta) and Autograd fallthrough are here, registered where they are defined. The
// tables of a batch's shape [blocks, t_max] come from one list (BLOAD_STEP_TABLES): adding such an
// operator adds its line there, its writer in the bridge, and its test.

#include <torch/library.h>

#include "../rust_bridge.h"
#include "bload/ops.h"
#include "checks.h"
#include "typed_op.h"

namespace bload {
namespace {

using at::Tensor;
using ops::typed_op;

// The tables [blocks, t_max] that take no argument but the table and the batch's shape: each
// line is the operator's name, its dtype, that dtype's C++ type, and the core's writer (through
// the bridge). Schema, C++ entry point, kernels and fallthrough are all made from this list.
#define BLOAD_STEP_TABLES(X)                                \
  X(end_mask, at::kBool, bool, ffi::write_end_mask)         \
  X(valid_mask, at::kBool, bool, ffi::write_valid_mask)     \
  X(segment_ids, at::kInt, int32_t, ffi::write_segment_ids) \
  X(position_ids, at::kLong, int64_t, ffi::write_position_ids)

// A [blocks, t_max] table written by the core from the host table, on the table's device.
template <typename T, auto write, at::ScalarType dtype>
Tensor step_table_kernel(const Tensor& table, int64_t blocks, int64_t t_max) {
  auto host = ops::host_table(table);
  ops::check_batch_shape(blocks, t_max);
  auto out = at::empty({blocks, t_max}, dtype);
  rethrowing([&] { write(elements<int64_t>(host), blocks, t_max, mutable_elements<T>(out)); });
  return out.to(table.device());
}

template <at::ScalarType dtype>
Tensor step_table_meta(const Tensor& table, int64_t blocks, int64_t t_max) {
  ops::check_table_layout(table);
  ops::check_batch_shape(blocks, t_max);
  return at::empty({blocks, t_max}, table.options().dtype(dtype));
}

Tensor reset_mask_kernel(const Tensor& table, int64_t blocks, int64_t t_max, bool carry) {
  auto host = ops::host_table(table);
  ops::check_batch_shape(blocks, t_max);
  auto out = at::empty({blocks, t_max}, at::kBool);
  rethrowing([&] {
    ffi::write_reset_mask(elements<int64_t>(host), blocks, t_max, carry,
                          mutable_elements<bool>(out));
  });
  return out.to(table.device());
}

Tensor reset_mask_meta(const Tensor& table, int64_t blocks, int64_t t_max, bool /*carry*/) {
  ops::check_table_layout(table);
  ops::check_batch_shape(blocks, t_max);
  return at::empty({blocks, t_max}, table.options().dtype(at::kBool));
}

Tensor carry_mask_kernel(const Tensor& table, int64_t blocks, int64_t t_max) {
  auto host = ops::host_table(table);
  ops::check_batch_shape(blocks, t_max);
  auto out = at::empty({blocks}, at::kBool);
  rethrowing([&] {
    ffi::write_carry_mask(elements<int64_t>(host), blocks, t_max, mutable_elements<bool>(out));
  });
  return out.to(table.device());
}

Tensor carry_mask_meta(const Tensor& table, int64_t blocks, int64_t t_max) {
  ops::check_table_layout(table);
  ops::check_batch_shape(blocks, t_max);
  return at::empty({blocks}, table.options().dtype(at::kBool));
}

Tensor cu_seqlens_kernel(const Tensor& table) {
  auto host = ops::host_table(table);
  auto out = at::empty({host.size(0) + 1}, at::kInt);
  rethrowing(
      [&] { ffi::write_cu_seqlens(elements<int64_t>(host), mutable_elements<int32_t>(out)); });
  return out.to(table.device());
}

Tensor cu_seqlens_meta(const Tensor& table) {
  ops::check_table_layout(table);
  return at::empty_symint({table.sym_size(0) + 1}, table.options().dtype(at::kInt));
}

}  // namespace

Tensor reset_mask(const Tensor& table, int64_t blocks, int64_t t_max, bool carry) {
  static auto op = typed_op<Tensor(const Tensor&, int64_t, int64_t, bool)>("bload::reset_mask");
  ops::check_defined(table, "table");
  return op.call(table, blocks, t_max, carry);
}

Tensor carry_mask(const Tensor& table, int64_t blocks, int64_t t_max) {
  static auto op = typed_op<Tensor(const Tensor&, int64_t, int64_t)>("bload::carry_mask");
  ops::check_defined(table, "table");
  return op.call(table, blocks, t_max);
}

Tensor cu_seqlens(const Tensor& table) {
  static auto op = typed_op<Tensor(const Tensor&)>("bload::cu_seqlens");
  ops::check_defined(table, "table");
  return op.call(table);
}

#define BLOAD_ENTRY_POINT(name, dtype, T, write)                                         \
  Tensor name(const Tensor& table, int64_t blocks, int64_t t_max) {                      \
    static auto op = typed_op<Tensor(const Tensor&, int64_t, int64_t)>("bload::" #name); \
    ops::check_defined(table, "table");                                                  \
    return op.call(table, blocks, t_max);                                                \
  }
BLOAD_STEP_TABLES(BLOAD_ENTRY_POINT)
#undef BLOAD_ENTRY_POINT

TORCH_LIBRARY_FRAGMENT(bload, m) {
  // carry: the rows carry their state from the previous batch (lanes), so only the starts of
  // sequences reset.
  m.def("reset_mask(Tensor table, int blocks, int t_max, bool carry=False) -> Tensor");
  // [blocks]: the rows whose first step continues the state carried from the previous batch.
  m.def("carry_mask(Tensor table, int blocks, int t_max) -> Tensor");
  m.def("cu_seqlens(Tensor table) -> Tensor");
#define BLOAD_DEFINE(name, dtype, T, write) \
  m.def(#name "(Tensor table, int blocks, int t_max) -> Tensor");
  BLOAD_STEP_TABLES(BLOAD_DEFINE)
#undef BLOAD_DEFINE
}

TORCH_LIBRARY_IMPL(bload, CompositeExplicitAutograd, m) {
  m.impl("reset_mask", &reset_mask_kernel);
  m.impl("carry_mask", &carry_mask_kernel);
  m.impl("cu_seqlens", &cu_seqlens_kernel);
#define BLOAD_KERNEL(name, dtype, T, write) m.impl(#name, &step_table_kernel<T, write, dtype>);
  BLOAD_STEP_TABLES(BLOAD_KERNEL)
#undef BLOAD_KERNEL
}

TORCH_LIBRARY_IMPL(bload, Meta, m) {
  m.impl("reset_mask", &reset_mask_meta);
  m.impl("carry_mask", &carry_mask_meta);
  m.impl("cu_seqlens", &cu_seqlens_meta);
#define BLOAD_META(name, dtype, T, write) m.impl(#name, &step_table_meta<dtype>);
  BLOAD_STEP_TABLES(BLOAD_META)
#undef BLOAD_META
}

// Tables are not differentiable: autograd passes the call on.
TORCH_LIBRARY_IMPL(bload, Autograd, m) {
  for (const char* name : {"reset_mask", "carry_mask", "cu_seqlens"}) {
    m.impl(name, torch::CppFunction::makeFallthrough());
  }
#define BLOAD_FALLTHROUGH(name, dtype, T, write) \
  m.impl(#name, torch::CppFunction::makeFallthrough());
  BLOAD_STEP_TABLES(BLOAD_FALLTHROUGH)
#undef BLOAD_FALLTHROUGH
}

}  // namespace bload
