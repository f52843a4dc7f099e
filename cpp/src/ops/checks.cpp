// The argument checks of torch.ops.bload's kernels (see checks.h). The block table's values are
// checked by the Rust core, the one home of its meaning; here only the tensors' layout.

#include "checks.h"

#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "../rust_bridge.h"

namespace bload::ops {
namespace {

// The values of an integer dtype, [lowest, highest]; none for the dtypes bload does not bound
// (the unsigned ones wider than a byte, which torch hardly supports).
std::optional<std::pair<int64_t, int64_t>> integer_range(at::ScalarType dtype) {
  switch (dtype) {
    case at::kByte:
    case at::kChar:
    case at::kShort:
    case at::kInt:
    case at::kLong:
      return AT_DISPATCH_INTEGRAL_TYPES(dtype, "bload padding range", [] {
        using limits = std::numeric_limits<scalar_t>;
        return std::pair<int64_t, int64_t>(limits::lowest(), limits::max());
      });
    default:
      return std::nullopt;
  }
}

// The largest finite value of a floating dtype; none where every double fits (or for the 8-bit
// formats, whose conversions saturate).
std::optional<double> largest_finite(at::ScalarType dtype) {
  switch (dtype) {
    case at::kHalf:
      return static_cast<double>(std::numeric_limits<at::Half>::max());
    case at::kBFloat16:
      return static_cast<double>(std::numeric_limits<at::BFloat16>::max());
    case at::kFloat:
      return static_cast<double>(std::numeric_limits<float>::max());
    default:
      return std::nullopt;
  }
}

// Whether `sequence`'s shape after its steps is `first`'s. Plain sizes where neither is symbolic
// (every eager batch): a comparison of SymInts costs calls per dimension, for every piece.
bool same_trailing_shape(const at::Tensor& sequence, const at::Tensor& first) {
  if (!sequence.unsafeGetTensorImpl()->has_symbolic_sizes_strides() &&
      !first.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) {
    return sequence.sizes().slice(1) == first.sizes().slice(1);
  }
  return sequence.sym_sizes().slice(1) == first.sym_sizes().slice(1);
}

}  // namespace

void check_defined(const at::Tensor& tensor, const char* name) {
  TORCH_CHECK(tensor.defined(), name, ": expected a tensor, got an undefined at::Tensor");
}

void check_has_values(const at::Tensor& tensor, const char* name) {
  TORCH_CHECK(!tensor.is_meta(), name, ": a meta tensor has no values: expected ", name,
              " on the CPU or another device with data");
}

void check_lengths(const at::Tensor& lengths, const std::string& name) {
  TORCH_CHECK(lengths.dim() == 1 && !at::isFloatingType(lengths.scalar_type()) &&
                  !at::isComplexType(lengths.scalar_type()) && lengths.scalar_type() != at::kBool,
              name, ": expected a 1-d integer tensor of sequence lengths, got a ", lengths.dim(),
              "-d ", lengths.scalar_type(), " tensor");
  check_has_values(lengths, name.c_str());
  TORCH_CHECK(lengths.layout() == at::kStrided, name, ": expected a dense tensor of sequence ",
              "lengths, got a ", lengths.layout(), " one (call .to_dense())");
  // Planners read lengths as int64, where a uint64 from 2^63 up would wrap to a negative value
  // and be named as one: such a length is named here by its own value, as the core names any.
  if (lengths.scalar_type() == at::kUInt64) {
    const auto host = lengths.to(at::kCPU).contiguous();
    const auto* values = host.const_data_ptr<uint64_t>();
    for (int64_t i = 0; i < host.numel(); ++i)
      TORCH_CHECK(values[i] <= std::numeric_limits<uint32_t>::max(), name, "[", i,
                  "] = ", values[i], ": expected a length from 1 to ",
                  std::numeric_limits<uint32_t>::max(), " steps");
  }
}

void check_padding(const at::Scalar& padding, at::ScalarType dtype, const char* name) {
  if (padding.isSymbolic() || at::isComplexType(dtype)) return;  // symbolic: checked when run
  TORCH_CHECK(!padding.isComplex(), name, " = ", padding, ": expected a real value for ", dtype,
              " data, got a complex one");
  if (dtype == at::kBool) {
    const bool holds = padding.isBoolean() || padding.toDouble() == 0 || padding.toDouble() == 1;
    TORCH_CHECK(holds, name, " = ", padding, ": expected 0 or 1 (false or true) for bool data");
    return;
  }
  if (padding.isBoolean()) return;  // false and true are 0 and 1 in every dtype
  if (const auto range = integer_range(dtype)) {
    const auto [lowest, highest] = *range;
    bool holds;
    if (padding.isIntegral(false)) {
      const auto value = padding.toLong();
      holds = lowest <= value && value <= highest;
    } else {
      // highest + 1 as a double is exact for every dtype here (int64's is 2^63), so the bound
      // is exclusive; the value must also be a whole number, which a cast would round away.
      const auto value = padding.toDouble();
      holds = std::isfinite(value) && value == std::trunc(value) &&
              static_cast<double>(lowest) <= value && value < static_cast<double>(highest) + 1.0;
    }
    TORCH_CHECK(holds, name, " = ", padding, ": expected an integer in [", lowest, ", ", highest,
                "], what ", dtype, " data holds exactly");
    return;
  }
  if (const auto largest = largest_finite(dtype); largest && !padding.isIntegral(false)) {
    const auto value = padding.toDouble();
    TORCH_CHECK(!std::isfinite(value) || std::abs(value) <= *largest, name, " = ", padding,
                ": expected a value within [-", *largest, ", ", *largest,
                "] (or an infinity or NaN), what ", dtype, " data holds");
  }
}

void check_table_layout(const at::Tensor& table) {
  check_defined(table, "table");
  TORCH_CHECK(table.scalar_type() == at::kLong, "table: expected an int64 tensor, got ",
              table.scalar_type());
  TORCH_CHECK(table.dim() == 2 && table.size(1) == kTableColumns, "table: expected shape [pieces, ",
              kTableColumns, "] (", c10::Join(", ", ffi::table_column_names()), "), got ",
              table.sizes());
}

void check_batch_shape(int64_t blocks, int64_t t_max) {
  rethrowing([&] { ffi::check_block_table({}, blocks, t_max); });
}

at::Tensor host_table(const at::Tensor& table) {
  check_table_layout(table);
  check_has_values(table, "table");
  // Already on the host (every CPU batch): no dispatched call, which costs more than the checks.
  if (table.is_cpu() && table.is_contiguous()) return table;
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
  TORCH_CHECK(sequences[0].defined(),
              "sequences[0]: expected a tensor [steps, ...], got an undefined at::Tensor");
  const auto& first = sequences[0];
  for (size_t i = 0; i < sequences.size(); ++i) {
    const auto& sequence = sequences[i];
    TORCH_CHECK(sequence.defined(), "sequences[", i,
                "]: expected a tensor [steps, ...], got an undefined at::Tensor");
    TORCH_CHECK(sequence.dim() >= 1, "sequences[", i, "]: expected a tensor [steps, ...], got a ",
                sequence.dim(), "-d tensor");
    TORCH_CHECK(same_trailing_shape(sequence, first), "sequences[", i, "]: expected shape [steps, ",
                first.sym_sizes().slice(1), "] like sequences[0], got ", sequence.sym_sizes());
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
                               int64_t t_max, const at::Scalar& padding_value) {
  auto host = checked_host_table(table, blocks, t_max);
  check_sequences(sequences, host.size(0));
  check_padding(padding_value, sequences[0].scalar_type(), "padding_value");
  return host;
}

void check_pack_into_layout(const at::Tensor& out, at::TensorList sequences,
                            const c10::SymInt& rows) {
  if (!sequences.empty()) {
    check_sequences(sequences, rows);
    check_pack_into(out, sequences[0]);
    return;
  }
  // A batch of padding only: no sequence, so the trailing shape and dtype are out's own.
  TORCH_CHECK(rows == 0, "sequences: expected ", rows, " tensors, one per table row, got 0");
  TORCH_CHECK(out.dim() >= 2, "out: expected shape [blocks, t_max, ...], got ", out.sym_sizes());
}

at::Tensor checked_pack_into_inputs(const at::Tensor& out, at::TensorList sequences,
                                    const at::Tensor& table, const at::Scalar& padding_value) {
  check_table_layout(table);
  check_pack_into_layout(out, sequences, table.size(0));
  check_padding(padding_value, out.scalar_type(), "padding_value");
  return checked_host_table(table, out.size(0), out.size(1));
}

std::vector<c10::SymInt> packed_shape(const at::Tensor& first, c10::SymInt blocks,
                                      c10::SymInt t_max) {
  std::vector<c10::SymInt> shape{std::move(blocks), std::move(t_max)};
  for (const auto& size : first.sym_sizes().slice(1)) shape.push_back(size);
  return shape;
}

}  // namespace bload::ops
