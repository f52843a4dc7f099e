// torch.ops.bload: each operator's schema, its kernels (device, Meta, autograd), registered here where
// they are defined.
//
// `pack` and `unpack` carry gradients (each one's backward copies the other way; pack's is the
// operator `pack_backward`, so that AOT autograd traces it through its Meta kernel); the table
// ops have integer and bool outputs and fall through autograd.
//
// The kernels read the block table on the host (it is small: one row per piece) and check every
// value, then build their output on the host and move it to the input's device. That one kernel
// serves CPU and CUDA tensors alike (registered as CompositeExplicitAutograd). The Meta kernels
// give output shapes without reading values, for torch.compile and torch.export; `unpack` has
// none because its output shapes are the table's values.

#include "bload/ops.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>
#include <torch/version.h>

#include <array>
#include <limits>

#include "bload/planner.h"

namespace bload {
namespace {

using at::Tensor;

constexpr std::array<const char*, kTableColumns> kColumnNames = {
    "block", "block_offset", "length", "sequence", "offset", "sequence_length"};

// The checks that need no values, shared by the kernels and the Meta kernels.
void check_table_layout(const Tensor& table) {
  TORCH_CHECK(table.scalar_type() == at::kLong, "table: expected an int64 tensor, got ",
              table.scalar_type());
  TORCH_CHECK(table.dim() == 2 && table.size(1) == kTableColumns,
              "table: expected shape [pieces, ", kTableColumns,
              "] (block, block_offset, length, sequence, offset, sequence_length), got ",
              table.sizes());
}

void check_batch_shape(int64_t blocks, int64_t t_max) {
  TORCH_CHECK(blocks >= 1, "blocks = ", blocks, ": expected at least 1 block");
  TORCH_CHECK(t_max >= 1, "t_max = ", t_max, ": expected at least 1 step per block");
  TORCH_CHECK(t_max <= std::numeric_limits<int32_t>::max() / blocks, "blocks * t_max = ",
              blocks, " * ", t_max, ": expected at most ", std::numeric_limits<int32_t>::max(),
              " steps per batch (cu_seqlens and segment ids are int32)");
}

// A host copy of `table` (the tensor itself when it is on the CPU and contiguous), every value
// checked against a batch of [blocks, t_max].
Tensor checked_host_table(const Tensor& table, int64_t blocks, int64_t t_max) {
  check_table_layout(table);
  check_batch_shape(blocks, t_max);
  auto host = table.to(at::kCPU).contiguous();
  auto cells = host.accessor<int64_t, 2>();
  int64_t previous_block = -1;
  int64_t previous_end = 0;
  for (int64_t row = 0; row < host.size(0); ++row) {
    auto cell = [&](TableColumn column) { return cells[row][column]; };
    auto fail = [&](TableColumn column, const auto&... expected) {
      TORCH_CHECK(false, "table[", row, ", ", kColumnNames[column], "] = ", cell(column),
                  ": expected ", expected...);
    };
    const int64_t block = cell(kBlock), start = cell(kBlockOffset), length = cell(kLength);
    if (block < 0 || block >= blocks) fail(kBlock, "a block from 0 to ", blocks - 1);
    if (block < previous_block) fail(kBlock, "rows sorted by block (the previous row is in block ", previous_block, ")");
    if (block != previous_block) previous_end = 0;
    if (start < previous_end) fail(kBlockOffset, "at least ", previous_end, " (pieces of a block in order, not overlapping)");
    if (length < 1 || length > t_max - start) fail(kLength, "from 1 to t_max - block_offset = ", t_max - start);
    if (cell(kSequence) < 0) fail(kSequence, "a dataset index of at least 0");
    if (cell(kOffset) < 0) fail(kOffset, "at least 0");
    if (cell(kSequenceLength) < cell(kOffset) + length) fail(kSequenceLength, "at least offset + length = ", cell(kOffset) + length);
    previous_block = block;
    previous_end = start + length;
  }
  return host;
}

// A [blocks, t_max] table of `Step` built on the host: `fill` everywhere, then
// `write(row_of_steps, piece_cells, segment)` for every piece, where `segment` counts pieces
// inside their block from 0. Returned on the table's device.
template <typename Step, typename Write>
Tensor per_step_table(const Tensor& table, int64_t blocks, int64_t t_max, Step fill,
                      Write write) {
  auto host = checked_host_table(table, blocks, t_max);
  auto out = at::full({blocks, t_max}, fill, at::CppTypeToScalarType<Step>::value);
  auto steps = out.template accessor<Step, 2>();
  auto cells = host.accessor<int64_t, 2>();
  int64_t segment = -1, block = -1;
  for (int64_t row = 0; row < host.size(0); ++row) {
    segment = cells[row][kBlock] == block ? segment + 1 : 0;
    block = cells[row][kBlock];
    write(steps[block], cells[row], segment);
  }
  return out.to(table.device());
}

Tensor reset_mask_kernel(const Tensor& table, int64_t blocks, int64_t t_max) {
  return per_step_table<bool>(table, blocks, t_max, false, [](auto steps, auto piece, int64_t) {
    steps[piece[kBlockOffset]] = true;
  });
}

Tensor valid_mask_kernel(const Tensor& table, int64_t blocks, int64_t t_max) {
  return per_step_table<bool>(table, blocks, t_max, false, [](auto steps, auto piece, int64_t) {
    for (int64_t step = 0; step < piece[kLength]; ++step) steps[piece[kBlockOffset] + step] = true;
  });
}

Tensor segment_ids_kernel(const Tensor& table, int64_t blocks, int64_t t_max) {
  return per_step_table<int32_t>(
      table, blocks, t_max, -1, [](auto steps, auto piece, int64_t segment) {
        for (int64_t step = 0; step < piece[kLength]; ++step)
          steps[piece[kBlockOffset] + step] = static_cast<int32_t>(segment);
      });
}

Tensor position_ids_kernel(const Tensor& table, int64_t blocks, int64_t t_max) {
  return per_step_table<int64_t>(table, blocks, t_max, 0, [](auto steps, auto piece, int64_t) {
    for (int64_t step = 0; step < piece[kLength]; ++step)
      steps[piece[kBlockOffset] + step] = piece[kOffset] + step;
  });
}

Tensor cu_seqlens_kernel(const Tensor& table) {
  check_table_layout(table);
  auto host = table.to(at::kCPU).contiguous();
  auto cells = host.accessor<int64_t, 2>();
  auto out = at::empty({host.size(0) + 1}, at::kInt);
  auto sums = out.accessor<int32_t, 1>();
  int64_t total = 0;
  sums[0] = 0;
  for (int64_t row = 0; row < host.size(0); ++row) {
    const int64_t length = cells[row][kLength];
    TORCH_CHECK(length >= 1, "table[", row, ", length] = ", length, ": expected at least 1");
    total += length;
    TORCH_CHECK(total <= std::numeric_limits<int32_t>::max(), "table[:, length]: the lengths add up to more than ",
                std::numeric_limits<int32_t>::max(), " steps by row ", row, " (cu_seqlens are int32)");
    sums[row + 1] = static_cast<int32_t>(total);
  }
  return out.to(table.device());
}

// The trailing shape, dtype and device every sequence must share with the first, and one
// sequence per table row. Symbolic sizes allowed: the Meta kernel checks the same.
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

std::vector<c10::SymInt> packed_shape(const Tensor& first, c10::SymInt blocks, c10::SymInt t_max) {
  std::vector<c10::SymInt> shape{std::move(blocks), std::move(t_max)};
  for (const auto& size : first.sym_sizes().slice(1)) shape.push_back(size);
  return shape;
}

// Where a table row's piece lies: its steps in a packed [blocks, t_max, ...] tensor, and in its
// whole sequence [T_i, ...]. Both are views.
template <typename Row>
Tensor steps_in_block(const Tensor& packed, const Row& piece) {
  return packed.select(0, piece[kBlock]).narrow(0, piece[kBlockOffset], piece[kLength]);
}

template <typename Row>
Tensor steps_in_sequence(const Tensor& sequence, const Row& piece) {
  return sequence.narrow(0, piece[kOffset], piece[kLength]);
}

// Copies every piece into `out` and pads the rest; `host` and `sequences` are checked already.
void pack_host_table(Tensor& out, at::TensorList sequences, const Tensor& host,
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

Tensor pack_kernel(at::TensorList sequences, const Tensor& table, int64_t blocks, int64_t t_max,
                   const at::Scalar& padding_value) {
  auto host = checked_host_table(table, blocks, t_max);
  check_sequences(sequences, host.size(0));
  auto out = at::empty_symint(packed_shape(sequences[0], blocks, t_max), sequences[0].options());
  pack_host_table(out, sequences, host, padding_value);
  return out;
}

std::vector<Tensor> unpack_kernel(const Tensor& packed, const Tensor& table) {
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

// pack's backward: the gradient of each row's whole sequence, [steps[row], ...], zero outside
// its piece. An operator of its own, with a Meta kernel, so that AOT autograd can trace it.
std::vector<Tensor> pack_backward_kernel(const Tensor& grad, const Tensor& table,
                                         c10::SymIntArrayRef steps) {
  TORCH_CHECK(grad.dim() >= 2, "grad: expected a tensor [blocks, t_max, ...], got a ", grad.dim(),
              "-d tensor");
  auto host = checked_host_table(table, grad.size(0), grad.size(1));
  TORCH_CHECK(static_cast<int64_t>(steps.size()) == host.size(0), "steps: expected ",
              host.size(0), " lengths, one per table row, got ", steps.size());
  auto cells = host.accessor<int64_t, 2>();
  std::vector<Tensor> grads;
  for (int64_t row = 0; row < host.size(0); ++row) {
    std::vector<int64_t> shape{steps[row].expect_int()};
    for (auto size : grad.sizes().slice(2)) shape.push_back(size);
    auto sequence_grad = at::zeros(shape, grad.options());
    steps_in_sequence(sequence_grad, cells[row]).copy_(steps_in_block(grad, cells[row]));
    grads.push_back(sequence_grad);
  }
  return grads;
}

// Meta kernels: the same checks as far as shapes and dtypes go, and outputs of the right shape.

Tensor step_table_meta(const Tensor& table, int64_t blocks, int64_t t_max, at::ScalarType dtype) {
  check_table_layout(table);
  check_batch_shape(blocks, t_max);
  return at::empty({blocks, t_max}, table.options().dtype(dtype));
}

Tensor reset_mask_meta(const Tensor& table, int64_t blocks, int64_t t_max) {
  return step_table_meta(table, blocks, t_max, at::kBool);
}
Tensor valid_mask_meta(const Tensor& table, int64_t blocks, int64_t t_max) {
  return step_table_meta(table, blocks, t_max, at::kBool);
}
Tensor segment_ids_meta(const Tensor& table, int64_t blocks, int64_t t_max) {
  return step_table_meta(table, blocks, t_max, at::kInt);
}
Tensor position_ids_meta(const Tensor& table, int64_t blocks, int64_t t_max) {
  return step_table_meta(table, blocks, t_max, at::kLong);
}

Tensor cu_seqlens_meta(const Tensor& table) {
  check_table_layout(table);
  return at::empty_symint({table.sym_size(0) + 1}, table.options().dtype(at::kInt));
}

Tensor pack_meta(at::TensorList sequences, const Tensor& table, int64_t blocks, int64_t t_max,
                 const at::Scalar&) {
  check_table_layout(table);
  check_batch_shape(blocks, t_max);
  check_sequences(sequences, table.sym_size(0));
  return at::empty_symint(packed_shape(sequences[0], blocks, t_max), sequences[0].options());
}

// Autograd: a piece's gradient is the gradient of the steps it was copied to, and back.

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

Tensor call_pack(at::TensorList sequences, const Tensor& table, int64_t blocks, int64_t t_max,
                 const at::Scalar& padding_value);
std::vector<Tensor> call_unpack(const Tensor& packed, const Tensor& table);
std::vector<Tensor> call_pack_backward(const Tensor& grad, const Tensor& table,
                                       c10::SymIntArrayRef steps);

class PackFunction : public torch::autograd::Function<PackFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, at::TensorList sequences, const Tensor& table,
                        int64_t blocks, int64_t t_max, const at::Scalar& padding_value) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    std::vector<c10::SymInt> steps;
    for (const auto& sequence : sequences) steps.push_back(sequence.sym_size(0));
    ctx->saved_data["table"] = table;
    ctx->saved_data["steps"] = c10::SymIntArrayRef(steps);
    return call_pack(sequences, table, blocks, t_max, padding_value);
  }

  // One gradient per sequence, then none for the other arguments.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto out = call_pack_backward(grads[0], ctx->saved_data["table"].toTensor(),
                                  ctx->saved_data["steps"].toSymIntVector());
    out.resize(out.size() + 4);  // table, blocks, t_max, padding_value
    return out;
  }
};

class UnpackFunction : public torch::autograd::Function<UnpackFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const Tensor& packed, const Tensor& table) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->saved_data["table"] = table;
    ctx->saved_data["shape"] = packed.sizes().vec();
    return call_unpack(packed, table);
  }

  // The packed tensor's gradient: each piece's gradient at its steps, zero on padding.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto table = ctx->saved_data["table"].toTensor();
    const auto shape = ctx->saved_data["shape"].toIntVector();
    auto host = table.to(at::kCPU).contiguous();
    auto cells = host.accessor<int64_t, 2>();
    Tensor packed_grad;
    for (int64_t row = 0; row < host.size(0); ++row) {
      if (!grads[row].defined()) continue;  // a piece the loss did not use
      if (!packed_grad.defined()) packed_grad = at::zeros(shape, grads[row].options());
      steps_in_block(packed_grad, cells[row]).copy_(grads[row]);
    }
    return {packed_grad, Tensor()};
  }
};

Tensor pack_autograd(at::TensorList sequences, const Tensor& table, int64_t blocks,
                     int64_t t_max, const at::Scalar& padding_value) {
  return PackFunction::apply(sequences, table, blocks, t_max, padding_value);
}

std::vector<Tensor> unpack_autograd(const Tensor& packed, const Tensor& table) {
  return UnpackFunction::apply(packed, table);
}

std::vector<Tensor> pack_backward_meta(const Tensor& grad, const Tensor& table,
                                       c10::SymIntArrayRef steps) {
  check_table_layout(table);
  std::vector<Tensor> grads;
  for (const auto& length : steps) {
    std::vector<c10::SymInt> shape{length};
    for (const auto& size : grad.sym_sizes().slice(2)) shape.push_back(size);
    grads.push_back(at::empty_symint(shape, grad.options()));
  }
  return grads;
}

}  // namespace

// The torch release these operators were built against, for loaders outside Python (the Rust
// `bload::tch::load_plugin`) to refuse a library built for another torch.
extern "C" BLOAD_API const char* bload_torch_version() { return TORCH_VERSION; }

TORCH_LIBRARY(bload, m) {
  m.def("reset_mask(Tensor table, int blocks, int t_max) -> Tensor");
  m.def("valid_mask(Tensor table, int blocks, int t_max) -> Tensor");
  m.def("segment_ids(Tensor table, int blocks, int t_max) -> Tensor");
  m.def("position_ids(Tensor table, int blocks, int t_max) -> Tensor");
  m.def("cu_seqlens(Tensor table) -> Tensor");
  m.def(
      "pack(Tensor[] sequences, Tensor table, int blocks, int t_max, Scalar padding_value=0) "
      "-> Tensor");
  m.def("unpack(Tensor packed, Tensor table) -> Tensor[]");
  m.def("pack_backward(Tensor grad, Tensor table, SymInt[] steps) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(bload, CompositeExplicitAutograd, m) {
  m.impl("reset_mask", &reset_mask_kernel);
  m.impl("valid_mask", &valid_mask_kernel);
  m.impl("segment_ids", &segment_ids_kernel);
  m.impl("position_ids", &position_ids_kernel);
  m.impl("cu_seqlens", &cu_seqlens_kernel);
  m.impl("pack", &pack_kernel);
  m.impl("unpack", &unpack_kernel);
  m.impl("pack_backward", &pack_backward_kernel);
}

TORCH_LIBRARY_IMPL(bload, Autograd, m) {
  m.impl("pack", &pack_autograd);
  m.impl("unpack", &unpack_autograd);
  for (const char* name :
       {"reset_mask", "valid_mask", "segment_ids", "position_ids", "cu_seqlens"}) {
    m.impl(name, torch::CppFunction::makeFallthrough());
  }
}

TORCH_LIBRARY_IMPL(bload, Meta, m) {
  m.impl("reset_mask", &reset_mask_meta);
  m.impl("valid_mask", &valid_mask_meta);
  m.impl("segment_ids", &segment_ids_meta);
  m.impl("position_ids", &position_ids_meta);
  m.impl("cu_seqlens", &cu_seqlens_meta);
  m.impl("pack", &pack_meta);
  m.impl("pack_backward", &pack_backward_meta);
}

// The C++ entry points, through the dispatcher.

namespace {
template <typename Signature>
auto typed_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}
using StepTableOp = Tensor(const Tensor&, int64_t, int64_t);

Tensor call_pack(at::TensorList sequences, const Tensor& table, int64_t blocks, int64_t t_max,
                 const at::Scalar& padding_value) {
  static auto op = typed_op<Tensor(at::TensorList, const Tensor&, int64_t, int64_t,
                                   const at::Scalar&)>("bload::pack");
  return op.call(sequences, table, blocks, t_max, padding_value);
}

std::vector<Tensor> call_unpack(const Tensor& packed, const Tensor& table) {
  static auto op = typed_op<std::vector<Tensor>(const Tensor&, const Tensor&)>("bload::unpack");
  return op.call(packed, table);
}

std::vector<Tensor> call_pack_backward(const Tensor& grad, const Tensor& table,
                                       c10::SymIntArrayRef steps) {
  static auto op = typed_op<std::vector<Tensor>(const Tensor&, const Tensor&, c10::SymIntArrayRef)>(
      "bload::pack_backward");
  return op.call(grad, table, steps);
}
}  // namespace

Tensor reset_mask(const Tensor& table, int64_t blocks, int64_t t_max) {
  static auto op = typed_op<StepTableOp>("bload::reset_mask");
  return op.call(table, blocks, t_max);
}

Tensor valid_mask(const Tensor& table, int64_t blocks, int64_t t_max) {
  static auto op = typed_op<StepTableOp>("bload::valid_mask");
  return op.call(table, blocks, t_max);
}

Tensor segment_ids(const Tensor& table, int64_t blocks, int64_t t_max) {
  static auto op = typed_op<StepTableOp>("bload::segment_ids");
  return op.call(table, blocks, t_max);
}

Tensor position_ids(const Tensor& table, int64_t blocks, int64_t t_max) {
  static auto op = typed_op<StepTableOp>("bload::position_ids");
  return op.call(table, blocks, t_max);
}

Tensor cu_seqlens(const Tensor& table) {
  static auto op = typed_op<Tensor(const Tensor&)>("bload::cu_seqlens");
  return op.call(table);
}

Tensor pack(const std::vector<Tensor>& sequences, const Tensor& table, int64_t blocks,
            int64_t t_max, const at::Scalar& padding_value) {
  return call_pack(sequences, table, blocks, t_max, padding_value);
}

std::vector<Tensor> unpack(const Tensor& packed, const Tensor& table) {
  return call_unpack(packed, table);
}

void pack_into(Tensor& out, const std::vector<Tensor>& sequences, const Tensor& table,
               const at::Scalar& padding_value) {
  TORCH_CHECK(out.dim() >= 2, "out: expected a tensor [blocks, t_max, ...], got a ", out.dim(),
              "-d tensor");
  auto host = checked_host_table(table, out.size(0), out.size(1));
  check_sequences(sequences, host.size(0));
  TORCH_CHECK(out.sizes().slice(2) == sequences[0].sizes().slice(1) &&
                  out.scalar_type() == sequences[0].scalar_type(),
              "out: expected shape [blocks, t_max, ", sequences[0].sizes().slice(1), "] and dtype ",
              sequences[0].scalar_type(), " like the sequences, got ", out.sizes(), " and ",
              out.scalar_type());
  pack_host_table(out, sequences, host, padding_value);
}

}  // namespace bload
