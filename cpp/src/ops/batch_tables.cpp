// torch.ops.bload.batch_tables: every table of a packed batch that its block table determines
// (the core's BatchField::FROM_TABLE: reset, valid, ends, carry, lanes, segment_ids,
// position_ids, cu_seqlens, indices, state_in, state_out, document_ids, cu_seqlens_padded), from
// one check of the table and one pass over its rows.
// A loader makes a batch's tables with this one call; the per-table operators stay for
// TorchScript models that want one table.
//
// The operator's schema, its kernels (device-generic, Meta) and its Autograd fallthrough are all
// here, registered where they are defined: adding an operator adds a file like this one.

#include <torch/library.h>

#include <array>
#include <string>
#include <vector>

#include "../rust_bridge.h"
#include "bload/ops.h"
#include "checks.h"
#include "typed_op.h"

namespace bload {
namespace {

using at::Tensor;

// The outputs in the core's order, with their dtypes and shapes (BatchField::FROM_TABLE; the
// ctest BatchTables.FollowTheCoresDeclaration checks this list against it).
enum class Shape { Steps, Blocks, Pieces, PiecesPlusOne, Segments };
struct Output {
  at::ScalarType dtype;
  Shape shape;
};
constexpr std::array<Output, 13> kOutputs{{
    {at::kBool, Shape::Steps},         // reset
    {at::kBool, Shape::Steps},         // valid
    {at::kBool, Shape::Steps},         // ends
    {at::kBool, Shape::Blocks},        // carry
    {at::kLong, Shape::Blocks},        // lanes
    {at::kInt, Shape::Steps},          // segment_ids
    {at::kLong, Shape::Steps},         // position_ids
    {at::kInt, Shape::PiecesPlusOne},  // cu_seqlens
    {at::kLong, Shape::Pieces},        // indices
    {at::kLong, Shape::Pieces},        // state_in
    {at::kLong, Shape::Blocks},        // state_out
    {at::kInt, Shape::Steps},          // document_ids
    {at::kInt, Shape::Segments},       // cu_seqlens_padded
}};

template <typename Int>
std::vector<Int> dims(Shape shape, Int blocks, Int t_max, Int pieces) {
  switch (shape) {
    case Shape::Steps:
      return {blocks, t_max};
    case Shape::Blocks:
      return {blocks};
    case Shape::Pieces:
      return {pieces};
    case Shape::PiecesPlusOne:
      return {pieces + 1};
    // The most documents a table of `pieces` rows can have (padding around every piece), + 1.
    case Shape::Segments:
      return {2 * pieces + blocks + 1};
  }
  return {};
}

// Writes every table into `out` (host tensors of kOutputs' dtypes and shapes) from one check of
// the host table.
void write_tables(const Tensor& host, int64_t blocks, int64_t t_max, bool carry, int64_t first_lane,
                  const std::string& positions, std::vector<Tensor>& out) {
  rethrowing([&] {
    ffi::write_batch_tables(elements<int64_t>(host), blocks, t_max, carry, first_lane, positions,
                            mutable_elements<bool>(out[0]), mutable_elements<bool>(out[1]),
                            mutable_elements<bool>(out[2]), mutable_elements<bool>(out[3]),
                            mutable_elements<int64_t>(out[4]), mutable_elements<int32_t>(out[5]),
                            mutable_elements<int64_t>(out[6]), mutable_elements<int32_t>(out[7]),
                            mutable_elements<int64_t>(out[8]),
                            mutable_elements<int64_t>(out[9]),    // state_in
                            mutable_elements<int64_t>(out[10]),   // state_out
                            mutable_elements<int32_t>(out[11]),   // document_ids
                            mutable_elements<int32_t>(out[12]));  // cu_seqlens_padded
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
  for (const auto& output : kOutputs) {
    const auto shape = dims<c10::SymInt>(output.shape, blocks, t_max, table.sym_size(0));
    outputs.push_back(at::empty_symint(shape, table.options().dtype(output.dtype)));
  }
  return outputs;
}

}  // namespace

std::vector<Tensor> ops::batch_tables_on_host(const Tensor& host, int64_t blocks, int64_t t_max,
                                              bool carry, int64_t first_lane,
                                              const std::string& positions) {
  check_batch_shape(blocks, t_max);
  std::vector<Tensor> out;
  for (const auto& output : kOutputs) {
    out.push_back(at::empty(dims(output.shape, blocks, t_max, host.size(0)), output.dtype));
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
