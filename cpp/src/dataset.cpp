#include "bload/dataset.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>

#include "bload/ops.h"

namespace bload {
namespace {

// [blocks, t_max, ...] like `like`'s steps, pinned when asked and possible, from `buffers` when
// given.
at::Tensor packed_output(const BatchRequest& request, const at::Tensor& like, bool pin_memory,
                         PackBuffers* buffers) {
  std::vector<int64_t> shape{request.blocks, request.t_max};
  auto steps = like.sizes().slice(1);
  shape.insert(shape.end(), steps.begin(), steps.end());
  bool pin = pin_memory && like.is_cpu();
  if (pin && !at::globalContext().hasCUDA()) {
    TORCH_WARN_ONCE("bload: pin_memory is set but no CUDA device is available; packed batches "
                    "are allocated in ordinary memory");
    pin = false;
  }
  const auto options = like.options().pinned_memory(pin);
  return buffers ? buffers->take(shape, options) : at::empty(shape, options);
}

at::Tensor pack_or_pad(const BatchRequest& request, const std::vector<at::Tensor>& sequences,
                       double padding, bool pin_memory, PackBuffers* buffers) {
  TORCH_CHECK(!sequences.empty(), "pack_batch: expected at least one example");
  auto out = packed_output(request, sequences[0], pin_memory, buffers);
  if (request.table.size(0) == 0) {
    out.fill_(padding);
  } else {
    pack_into(out, sequences, request.table, padding);
  }
  return out;
}

}  // namespace

at::Tensor PackBuffers::take(at::IntArrayRef shape, const at::TensorOptions& options) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [tensor, pinned] : kept_) {
    // Held here alone (no other handle, no view): its last batch is gone.
    if (tensor.use_count() == 1 && tensor.storage().use_count() == 1 && tensor.sizes() == shape &&
        tensor.dtype() == options.dtype() && tensor.device() == options.device() &&
        pinned == options.pinned_memory()) {
      return tensor;
    }
  }
  if (kept_.size() == kKept) kept_.erase(kept_.begin());  // the oldest: its holder keeps it
  kept_.push_back({at::empty(shape, options), options.pinned_memory()});
  return kept_.back().tensor;
}

PackedBatch pack_batch(const BatchRequest& request, const std::vector<at::Tensor>& data,
                       const std::vector<at::Tensor>& target, const Options& options,
                       PackBuffers* buffers) {
  const auto& table = request.table;
  PackedBatch batch;
  batch.data = pack_or_pad(request, data, options.data_padding(), options.pin_memory(), buffers);
  batch.target =
      pack_or_pad(request, target, options.target_padding(), options.pin_memory(), buffers);
  batch.reset = reset_mask(table, request.blocks, request.t_max, request.carry);
  batch.valid = valid_mask(table, request.blocks, request.t_max);
  batch.ends = end_mask(table, request.blocks, request.t_max);
  batch.carry = request.carry ? carry_mask(table, request.blocks, request.t_max)
                              : at::zeros({request.blocks}, at::kBool);
  batch.lanes = at::arange(request.first_lane, request.first_lane + request.blocks, at::kLong);
  batch.segment_ids = segment_ids(table, request.blocks, request.t_max);
  batch.position_ids = position_ids(table, request.blocks, request.t_max);
  batch.cu_seqlens = cu_seqlens(table);
  batch.indices = table.select(1, kSequence).clone();
  batch.table = table;
  return batch;
}

}  // namespace bload
