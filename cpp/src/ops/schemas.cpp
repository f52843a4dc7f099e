// torch.ops.bload's packing operators (pack, pack_into, unpack, pack_backward) and host
// utilities: each schema, and its C++ entry point (bload/ops.h), which goes through torch's
// dispatcher to the kernel for its inputs' dispatch key. The packing kernels live in one file per
// dispatch key (cpu_kernels.cpp, device_kernels.cpp, meta_kernels.cpp, autograd_kernels.cpp),
// each registering itself. The table operators keep schema, kernels and registrations in one file
// each (step_tables.cpp, from one list; batch_tables.cpp), as do the names (names.cpp).

#include <torch/library.h>

#include "../rust_bridge.h"
#include "bload/ops.h"
#include "checks.h"
#include "typed_op.h"

namespace bload {
namespace {

using at::Tensor;
using ops::typed_op;

// Host utilities with no tensor to dispatch on: one kernel, registered with the schema.

// The core's lengths readers (docs/data.md), as int64 [sequences]; no format: detected.
Tensor read_lengths_op(std::string path, std::optional<std::string> format) {
  auto lengths = read_lengths(path, format.value_or(""));
  return at::tensor(lengths, at::kLong);
}

std::string lengths_format_op(std::string path) { return lengths_format(path); }

// A sequence store checked by the core (docs/data.md): its offsets, and the rest of its layout as
// JSON (count, steps, each field's name, dtype, shape, path and sizes), which Python maps.
std::tuple<Tensor, std::string> open_store_op(std::string path) {
  auto info = rethrowing([&] { return ffi::open_sequence_store(path); });
  auto offsets = at::empty({static_cast<int64_t>(info.offsets.size())}, at::kLong);
  std::copy(info.offsets.begin(), info.offsets.end(), offsets.data_ptr<int64_t>());
  return {offsets, std::string(info.layout_json)};
}

// The page-aligned byte ranges of a store's field file (offsets: the store's, int64 [count + 1])
// that a block table's pieces read, int64 [ranges, 2] of (start, length) in the table's order:
// what read-ahead advises the kernel of (the core's store_read_ranges, docs/read_ahead.md).
Tensor store_read_ranges_op(const Tensor& offsets, int64_t step_bytes, int64_t file_bytes,
                            const Tensor& table, int64_t page) {
  ops::check_defined(offsets, "offsets");
  TORCH_CHECK(offsets.dim() == 1 && offsets.scalar_type() == at::kLong && offsets.is_cpu(),
              "offsets = a ", offsets.scalar_type(), " tensor of ", offsets.dim(),
              " dimensions on ", offsets.device(), ": expected int64 [count + 1] on the CPU");
  ops::check_defined(table, "table");
  const auto host = ops::host_table(table);
  const auto flat = offsets.contiguous();
  auto ranges = rethrowing([&] {
    return ffi::store_read_ranges(elements<int64_t>(flat), step_bytes, file_bytes,
                                  elements<int64_t>(host), page);
  });
  auto out = at::empty({static_cast<int64_t>(ranges.size()) / 2, 2}, at::kLong);
  std::copy(ranges.begin(), ranges.end(), out.data_ptr<int64_t>());
  return out;
}

// The read_ahead option's default and its most (the core's), for Python's sampler.
std::vector<int64_t> read_ahead_bounds_op() {
  auto bounds = ffi::read_ahead_bounds();
  return {bounds.begin(), bounds.end()};
}

// An item pool's default items a worker and its most workers (the core's), for Python's
// ItemPool.
std::vector<int64_t> item_pool_bounds_op() {
  auto bounds = ffi::item_pool_bounds();
  return {bounds.begin(), bounds.end()};
}

// The block table's column names, in order.
std::vector<std::string> table_columns_op() {
  std::vector<std::string> names;
  for (const auto& name : ffi::table_column_names()) names.emplace_back(std::string(name));
  return names;
}

}  // namespace

TORCH_LIBRARY(bload, m) {
  m.def(
      "pack(Tensor[] sequences, Tensor table, int blocks, int t_max, Scalar padding_value=0) "
      "-> Tensor");
  // pack into a caller's buffer, whose shape gives blocks and t_max. It returns nothing, as
  // functionalization wants of a custom operator that mutates (torch.compile can trace it).
  m.def(
      "pack_into(Tensor(a!) out, Tensor[] sequences, Tensor table, Scalar padding_value=0) -> ()");
  m.def("unpack(Tensor packed, Tensor table) -> Tensor[]");
  m.def("pack_backward(Tensor grad, Tensor table, SymInt[] steps) -> Tensor[]");
  m.def("read_lengths(str path, str? format=None) -> Tensor", &read_lengths_op);
  m.def("lengths_format(str path) -> str", &lengths_format_op);
  m.def("open_store(str path) -> (Tensor, str)", &open_store_op);
  m.def("table_columns() -> str[]", &table_columns_op);
  m.def(
      "store_read_ranges(Tensor offsets, int step_bytes, int file_bytes, Tensor table, int page) "
      "-> Tensor",
      &store_read_ranges_op);
  m.def("read_ahead_bounds() -> int[]", &read_ahead_bounds_op);
  m.def("item_pool_bounds() -> int[]", &item_pool_bounds_op);
}

Tensor pack(const std::vector<Tensor>& sequences, const Tensor& table, int64_t blocks,
            int64_t t_max, const at::Scalar& padding_value) {
  static auto op =
      typed_op<Tensor(at::TensorList, const Tensor&, int64_t, int64_t, const at::Scalar&)>(
          "bload::pack");
  ops::check_defined(table, "table");
  return op.call(sequences, table, blocks, t_max, padding_value);
}

std::vector<Tensor> unpack(const Tensor& packed, const Tensor& table) {
  static auto op = typed_op<std::vector<Tensor>(const Tensor&, const Tensor&)>("bload::unpack");
  ops::check_defined(packed, "packed");
  ops::check_defined(table, "table");
  return op.call(packed, table);
}

std::vector<Tensor> ops::call_pack_backward(const Tensor& grad, const Tensor& table,
                                            c10::SymIntArrayRef steps) {
  static auto op = typed_op<std::vector<Tensor>(const Tensor&, const Tensor&, c10::SymIntArrayRef)>(
      "bload::pack_backward");
  return op.call(grad, table, steps);
}

void ops::call_pack_into(Tensor& out, at::TensorList sequences, const Tensor& table,
                         const at::Scalar& padding_value) {
  static auto op =
      typed_op<void(Tensor&, at::TensorList, const Tensor&, const at::Scalar&)>("bload::pack_into");
  op.call(out, sequences, table, padding_value);
}

void pack_into(Tensor& out, const std::vector<Tensor>& sequences, const Tensor& table,
               const at::Scalar& padding_value) {
  ops::check_defined(out, "out");
  ops::check_defined(table, "table");
  ops::call_pack_into(out, sequences, table, padding_value);
}

}  // namespace bload
