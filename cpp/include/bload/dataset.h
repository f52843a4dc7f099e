#pragma once
// bload::BlockDataset: wraps a map-style dataset of variable-length sequences and returns
// packed batches, for the requests BlockSampler hands out.
//
// The inner dataset's examples are torch::data::Example<> whose data and target are per-step
// tensors [T_i, ...] (T_i the sequence's length in the lengths the sampler was built from).

#include <torch/data/datasets/base.h>
#include <torch/data/example.h>

#include <optional>
#include <utility>
#include <vector>

#include "bload/export.h"
#include "bload/planner.h"

namespace bload {

// One packed batch of one rank. Every per-step tensor is [blocks, t_max, ...].
struct PackedBatch {
  at::Tensor data;          // padding steps hold Options::data_padding
  at::Tensor target;        // padding steps hold Options::target_padding
  at::Tensor reset;         // bool: first step of every piece, where recurrent state resets
  at::Tensor valid;         // bool: real steps
  at::Tensor segment_ids;   // int32: piece index inside its block, -1 on padding
  at::Tensor position_ids;  // int64: step index inside the sequence, 0 on padding
  at::Tensor cu_seqlens;    // int32 [pieces + 1]: flash-attention's varlen offsets
  at::Tensor indices;       // int64 [pieces]: dataset index of every piece
  at::Tensor table;         // int64 [pieces, kTableColumns]: the block table, on the CPU
};

// Packs one request from the examples of its pieces, one per table row, in row order. When the
// table has no row (a batch of empty blocks: rounding the epoch up to whole global batches can
// leave fewer empty blocks than a global batch holds, more pieces than blocks notwithstanding),
// `data` and `target` hold one example that only gives the trailing shape and dtype.
BLOAD_API PackedBatch pack_batch(const BatchRequest& request, const std::vector<at::Tensor>& data,
                                 const std::vector<at::Tensor>& target, const Options& options);

template <typename Inner>
class BlockDataset
    : public torch::data::datasets::BatchDataset<BlockDataset<Inner>, PackedBatch, BatchRequest> {
 public:
  BlockDataset(Inner inner, Options options)
      : inner_(std::move(inner)), options_(std::move(options)) {}

  PackedBatch get_batch(BatchRequest request) override {
    const int64_t rows = request.table.size(0);
    // A table with no row still loads one example, for the output's trailing shape and dtype.
    const int64_t examples = std::max<int64_t>(rows, 1);
    std::vector<at::Tensor> data, target;
    data.reserve(examples);
    target.reserve(examples);
    auto cells = request.table.template accessor<int64_t, 2>();
    for (int64_t row = 0; row < examples; ++row) {
      auto example = inner_.get(rows == 0 ? 0 : static_cast<size_t>(cells[row][kSequence]));
      data.push_back(std::move(example.data));
      target.push_back(std::move(example.target));
    }
    return pack_batch(request, data, target, options_);
  }

  std::optional<size_t> size() const override { return inner_.size(); }

  Inner& inner() { return inner_; }
  const Options& options() const { return options_; }

 private:
  Inner inner_;
  Options options_;
};

}  // namespace bload
