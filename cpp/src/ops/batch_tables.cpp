// torch.ops.bload.batch_tables: every table of a packed batch that its block table determines
// (the core's BatchField::FROM_TABLE, as torch.ops.bload.batch_fields() lists them), from one
// check of the table and one pass over its rows; allocated by looping over that declaration.
// A loader makes a batch's tables with this one call; the per-table operators stay for
// TorchScript models that want one table.
//
// The operator's schema, its kernels (device-generic, Meta) and its Autograd fallthrough are all
// here, registered where they are defined: adding an operator adds a file like this one.

#include <torch/library.h>

#include <string>
#include <vector>

#include "../rust_bridge.h"
#include "bload/ops.h"
#include "checks.h"
#include "typed_op.h"

namespace bload {
namespace {

using at::Tensor;

// An output as the core declares it: its dtype, and each dimension as a sum of the batch's sizes
// (ffi::DimRule). Read once from the core's list of fields, so a new field written from the table
// needs nothing here.
struct Output {
  std::string name;
  at::ScalarType dtype;
  std::vector<ffi::DimRule> dims;
};

at::ScalarType dtype_named(const std::string& name, const std::string& field) {
  if (name == "bool") return at::kBool;
  if (name == "int32") return at::kInt;
  if (name == "int64") return at::kLong;
  TORCH_CHECK(false, "bload: the core declares field ", field, " of dtype ", name,
              ": this library knows bool, int32 and int64");
}

// The fields batch_tables writes (the core's BatchField::FROM_TABLE), in its order.
const std::vector<Output>& table_outputs() {
  static const std::vector<Output> list = [] {
    std::vector<Output> fields;
    for (const auto& field : ffi::batch_fields()) {
      if (!field.from_table) continue;
      std::string name(field.name);
      fields.push_back({name,
                        dtype_named(std::string(field.dtype), name),
                        {field.dims.begin(), field.dims.end()}});
    }
    return fields;
  }();
  return list;
}

// The output's dimensions for a batch of these sizes (int64_t, or c10::SymInt for Meta).
template <typename Int>
std::vector<Int> dims(const Output& output, const Int& blocks, const Int& t_max,
                      const Int& pieces) {
  std::vector<Int> sizes;
  for (const auto& rule : output.dims) {
    sizes.push_back(blocks * rule.blocks + t_max * rule.t_max + pieces * rule.pieces +
                    rule.constant);
  }
  return sizes;
}

// Writes every table into `out` (host tensors of table_outputs()' dtypes and shapes) from one check
// of the host table.
void write_tables(const Tensor& host, int64_t blocks, int64_t t_max, bool carry, int64_t first_lane,
                  const std::string& positions, std::vector<Tensor>& out) {
  std::vector<ffi::TableBuffer> buffers;
  buffers.reserve(out.size());
  for (auto& tensor : out) {
    buffers.push_back({reinterpret_cast<size_t>(tensor.data_ptr()), tensor.nbytes()});
  }
  rethrowing([&] {
    // Each buffer is a contiguous tensor of its own, of the field's dtype (table_outputs()).
    ffi::write_batch_tables(elements<int64_t>(host), blocks, t_max, carry, first_lane, positions,
                            rust::Slice<const ffi::TableBuffer>(buffers.data(), buffers.size()));
  });
}

// Written on the host, where the table is read, then moved to the table's device. Each output
// is a tensor of its own: torch's checks (opcheck's fake-tensor test) want an operator's outputs
// not to alias each other.
std::vector<Tensor> batch_tables_kernel(const Tensor& table, int64_t blocks, int64_t t_max,
                                        bool carry, int64_t first_lane,
                                        c10::string_view positions) {
  auto out = ops::batch_tables_on_host(ops::host_table(table), blocks, t_max, carry, first_lane,
                                       std::string(positions));
  if (!table.is_cpu()) {
    for (auto& tensor : out) tensor = tensor.to(table.device());
  }
  return out;
}

std::vector<Tensor> batch_tables_meta(const Tensor& table, int64_t blocks, int64_t t_max,
                                      bool /*carry*/, int64_t /*first_lane*/,
                                      c10::string_view /*positions*/) {
  ops::check_table_layout(table);
  ops::check_batch_shape(blocks, t_max);
  std::vector<Tensor> outputs;
  for (const auto& output : table_outputs()) {
    const auto shape = dims<c10::SymInt>(output, blocks, t_max, table.sym_size(0));
    outputs.push_back(at::empty_symint(shape, table.options().dtype(output.dtype)));
  }
  return outputs;
}

}  // namespace

const std::vector<std::string>& ops::batch_table_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> list;
    for (const auto& output : table_outputs()) list.push_back(output.name);
    return list;
  }();
  return names;
}

std::vector<Tensor> ops::batch_tables_on_host(const Tensor& host, int64_t blocks, int64_t t_max,
                                              bool carry, int64_t first_lane,
                                              const std::string& positions) {
  check_batch_shape(blocks, t_max);
  std::vector<Tensor> out;
  out.reserve(table_outputs().size());
  for (const auto& output : table_outputs()) {
    out.push_back(at::empty(dims<int64_t>(output, blocks, t_max, host.size(0)), output.dtype));
  }
  write_tables(host, blocks, t_max, carry, first_lane, positions, out);
  return out;
}

std::vector<Tensor> batch_tables(const Tensor& table, int64_t blocks, int64_t t_max, bool carry,
                                 int64_t first_lane, const std::string& positions) {
  static auto op = ops::typed_op<std::vector<Tensor>(const Tensor&, int64_t, int64_t, bool, int64_t,
                                                     c10::string_view)>("bload::batch_tables");
  ops::check_defined(table, "table");
  return op.call(table, blocks, t_max, carry, first_lane, positions);
}

TORCH_LIBRARY_FRAGMENT(bload, m) {
  m.def(
      "batch_tables(Tensor table, int blocks, int t_max, bool carry=False, int first_lane=0, "
      "str positions=\"sequence\") -> Tensor[]");
}

TORCH_LIBRARY_IMPL(bload, CompositeExplicitAutograd, m) {
  m.impl("batch_tables", &batch_tables_kernel);
}

TORCH_LIBRARY_IMPL(bload, Meta, m) { m.impl("batch_tables", &batch_tables_meta); }

// Tables are not differentiable: autograd passes the call on.
TORCH_LIBRARY_IMPL(bload, Autograd, m) {
  m.impl("batch_tables", torch::CppFunction::makeFallthrough());
}

}  // namespace bload
