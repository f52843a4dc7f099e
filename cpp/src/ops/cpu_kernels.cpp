// torch.ops.bload's CPU kernels: `pack` and `pack_into` write every output byte once, with plain
// copies: each piece's steps are one memcpy from its sequence, and padding is written only in the
// gaps no piece covers (the tail of a block, and nothing else in a plan bload makes). Walking the
// table in order, the gap before a row ends where the row's piece starts, so rows are
// independent and large batches are written in parallel.

#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cstring>

#include "checks.h"

namespace bload::ops {
namespace {

using at::Tensor;

// The bytes of one padding step ([trailing...] of `out`'s dtype), written over `steps` steps at
// `destination` by doubling copies (or one memset where the padding is all zero bytes).
class PaddingSteps {
 public:
  PaddingSteps(const Tensor& out, const at::Scalar& value)
      : step_(at::full(out.sizes().slice(2), value, out.options()).contiguous()),
        bytes_(static_cast<size_t>(step_.nbytes())) {
    const auto* first = static_cast<const std::byte*>(step_.const_data_ptr());
    zero_ = std::all_of(first, first + bytes_, [](std::byte b) { return b == std::byte{0}; });
  }

  void write(std::byte* destination, int64_t steps) const {
    const size_t total = bytes_ * static_cast<size_t>(steps);
    if (total == 0) return;
    if (zero_) {
      std::memset(destination, 0, total);
      return;
    }
    std::memcpy(destination, step_.const_data_ptr(), bytes_);
    for (size_t done = bytes_; done < total;) {
      const size_t next = std::min(done, total - done);
      std::memcpy(destination + done, destination, next);
      done += next;
    }
  }

 private:
  Tensor step_;
  size_t bytes_;
  bool zero_ = false;
};

// Packs into a contiguous CPU `out`, the table's rows [begin, end), each with the gap before its
// piece; the gap after the last row is written by the caller.
class BytePacker {
 public:
  BytePacker(Tensor& out, at::TensorList sequences, const Tensor& host,
             const at::Scalar& padding_value)
      : padding_(out, padding_value),
        sequences_(sequences),
        cells_(host.accessor<int64_t, 2>()),
        out_(out),
        base_(static_cast<std::byte*>(out.mutable_data_ptr())),
        t_max_(out.size(1)),
        steps_(out.size(0) * out.size(1)),
        step_bytes_(static_cast<size_t>(out.nbytes() / steps_)) {}

  void write_rows(int64_t begin, int64_t end) const {
    for (int64_t row = begin; row < end; ++row) {
      const auto piece = cells_[row];
      const int64_t first = first_step(piece, t_max_);
      const int64_t gap_start = row == 0 ? 0 : end_of(row - 1);
      padding_.write(base_ + gap_start * step_bytes_, first - gap_start);
      const Tensor& sequence = sequences_[row];
      const int64_t start = piece_start(piece, sequence.size(0), "sequences", row);
      if (sequence.is_contiguous()) {
        std::memcpy(base_ + first * step_bytes_,
                    static_cast<const std::byte*>(sequence.const_data_ptr()) + start * step_bytes_,
                    step_bytes_ * static_cast<size_t>(piece[kLength]));
      } else {
        steps_in_block(out_, piece).copy_(sequence.narrow(0, start, piece[kLength]));
      }
    }
  }

  void write_tail() const {
    const int64_t rows = cells_.size(0);
    const int64_t last_end = rows == 0 ? 0 : end_of(rows - 1);
    padding_.write(base_ + last_end * step_bytes_, steps_ - last_end);
  }

 private:
  int64_t end_of(int64_t row) const { return first_step(cells_[row], t_max_) + cells_[row][kLength]; }

  PaddingSteps padding_;
  at::TensorList sequences_;
  at::TensorAccessor<int64_t, 2> cells_;
  Tensor& out_;
  std::byte* base_;
  int64_t t_max_, steps_;
  size_t step_bytes_;
};

void pack_on_cpu(Tensor& out, at::TensorList sequences, const Tensor& host,
                 const at::Scalar& padding_value) {
  if (!out.is_contiguous()) {
    auto dense = at::empty(out.sizes(), out.options());
    pack_on_cpu(dense, sequences, host, padding_value);
    out.copy_(dense);
    return;
  }
  const BytePacker packer(out, sequences, host, padding_value);
  const int64_t rows = host.size(0);
  // Small batches stay on the calling thread: waking the pool costs more than they do.
  const int64_t grain = out.nbytes() < (int64_t{1} << 20) ? std::max<int64_t>(rows, 1) : 1;
  at::parallel_for(0, rows, grain,
                   [&](int64_t begin, int64_t end) { packer.write_rows(begin, end); });
  packer.write_tail();
}

Tensor pack(at::TensorList sequences, const Tensor& table, int64_t blocks, int64_t t_max,
            const at::Scalar& padding_value) {
  auto host = checked_host_table(table, blocks, t_max);
  check_sequences(sequences, host.size(0));
  auto out = at::empty_symint(packed_shape(sequences[0], blocks, t_max), sequences[0].options());
  pack_on_cpu(out, sequences, host, padding_value);
  return out;
}

void pack_into(Tensor& out, at::TensorList sequences, const Tensor& table,
               const at::Scalar& padding_value) {
  check_sequences(sequences, table.size(0));
  check_pack_into(out, sequences[0]);
  auto host = checked_host_table(table, out.size(0), out.size(1));
  pack_on_cpu(out, sequences, host, padding_value);
}

}  // namespace

TORCH_LIBRARY_IMPL(bload, CPU, m) {
  m.impl("pack", &pack);
  m.impl("pack_into", &pack_into);
}

}  // namespace bload::ops
