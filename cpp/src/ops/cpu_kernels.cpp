// torch.ops.bload's CPU kernels: `pack` and `pack_into` write every output byte once, with plain
// copies: each piece's steps are one memcpy from its sequence, and padding is written only in the
// gaps no piece covers (the tail of a block, and nothing else in a plan bload makes). Walking the
// table in order, the gap before a row ends where the row's piece starts, so rows are
// independent and large batches are written in parallel.

#include <ATen/Dispatch_v2.h>
#include <ATen/Parallel.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/library.h>

#include <cstring>
#include <map>
#include <mutex>

#include "checks.h"

namespace bload::ops {
namespace {

using at::Tensor;

// The bytes of one padding step ([trailing...] of `out`'s dtype), written over `steps` steps at
// `destination` by doubling copies (or one memset where the padding is all zero bytes). Built
// without dispatching an operator: a small batch costs little more than its copies.
class PaddingSteps {
 public:
  PaddingSteps(const Tensor& out, const at::Scalar& value) {
    std::vector<std::byte> element(out.element_size());
    AT_DISPATCH_V2(out.scalar_type(), "bload::pack padding", AT_WRAP([&] {
                     const auto converted = value.to<scalar_t>();
                     std::memcpy(element.data(), &converted, sizeof converted);
                   }),
                   AT_EXPAND(AT_ALL_TYPES_AND_COMPLEX), at::kBool, at::kHalf, at::kBFloat16);
    zero_ =
        std::all_of(element.begin(), element.end(), [](std::byte b) { return b == std::byte{0}; });
    const int64_t elements = out.numel() / (out.size(0) * out.size(1));
    for (int64_t i = 0; i < elements; ++i)
      step_.insert(step_.end(), element.begin(), element.end());
  }

  void write(std::byte* destination, int64_t steps) const {
    const size_t total = step_.size() * static_cast<size_t>(steps);
    if (total == 0) return;
    if (zero_) {
      std::memset(destination, 0, total);
      return;
    }
    std::memcpy(destination, step_.data(), step_.size());
    for (size_t done = step_.size(); done < total;) {
      const size_t next = std::min(done, total - done);
      std::memcpy(destination + done, destination, next);
      done += next;
    }
  }

 private:
  std::vector<std::byte> step_;
  bool zero_ = false;
};

// Memory for `pack`'s large outputs, kept when their tensor is freed and handed out again: the C
// library gives blocks over 32 MB back to the system on free, and faulting a batch's pages in
// again costs more than packing it. A block returns here only through its tensor's deleter, so
// nothing that still holds it (a view, or a worker moving the batch to shared memory, which
// copies it first) can see it reused. At most kKept blocks wait here.
class OutputCache {
 public:
  static constexpr size_t kSmallest = size_t{128}
                                      << 10;  // malloc serves smaller ones from its heap
  static constexpr size_t kKept = 8;

  static OutputCache& instance() {
    static auto* cache = new OutputCache();  // never destroyed: tensors may outlive main
    return *cache;
  }

  Tensor empty(at::IntArrayRef shape, const at::TensorOptions& options) {
    const size_t bytes = c10::multiply_integers(shape) * options.dtype().itemsize();
    if (bytes < kSmallest || options.pinned_memory()) return at::empty(shape, options);
    void* block = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto kept = free_.find(bytes);
      if (kept != free_.end()) {
        block = kept->second;
        free_.erase(kept);
      }
    }
    if (!block) block = c10::alloc_cpu(bytes);
    return at::from_blob(
        block, shape, [bytes](void* data) { instance().give_back(data, bytes); }, options);
  }

 private:
  void give_back(void* block, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_.size() == kKept) {  // the smallest goes
      c10::free_cpu(free_.begin()->second);
      free_.erase(free_.begin());
    }
    free_.emplace(bytes, block);
  }

  std::mutex mutex_;
  std::multimap<size_t, void*> free_;
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
  int64_t end_of(int64_t row) const {
    return first_step(cells_[row], t_max_) + cells_[row][kLength];
  }

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
  auto host = checked_pack_inputs(sequences, table, blocks, t_max, padding_value);
  const auto shape = packed_shape(sequences[0], blocks, t_max);
  auto out = OutputCache::instance().empty(C10_AS_INTARRAYREF_SLOW(shape), sequences[0].options());
  pack_on_cpu(out, sequences, host, padding_value);
  return out;
}

void pack_into(Tensor& out, at::TensorList sequences, const Tensor& table,
               const at::Scalar& padding_value) {
  const auto host = checked_pack_into_inputs(out, sequences, table, padding_value);
  pack_on_cpu(out, sequences, host, padding_value);
}

}  // namespace

TORCH_LIBRARY_IMPL(bload, CPU, m) {
  m.impl("pack", &pack);
  m.impl("pack_into", &pack_into);
}

}  // namespace bload::ops
