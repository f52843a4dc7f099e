// The loader bload is measured against (--loop padded): what DDP users write without it. Each
// epoch the sequences are shuffled and dealt to the ranks as torch's DistributedSampler deals
// them (the count rounded up to a multiple of the world size by wrapping around, so every rank
// gets as many), `batch_size` to a batch, each batch padded to its own longest sequence.
//
// A padded batch is a bload::BatchRequest too: one sequence per row, a block table whose t_max
// is the batch's longest, so the same BlockDataset packs it and the same models run it (their
// reset mask is then the first step of every row).
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/randperm.h>
#include <bload/planner.h>
#include <torch/data/samplers/base.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace trainer {

class PaddedSampler : public torch::data::samplers::Sampler<bload::BatchRequest> {
 public:
  // The batches of `rank` of epoch `epoch` (its own shuffle, from seed and epoch).
  PaddedSampler(std::vector<int64_t> lengths, int64_t batch_size, int64_t world_size, int64_t rank,
                int64_t seed, int64_t epoch)
      : lengths_(std::move(lengths)), batch_size_(batch_size) {
    const auto count = static_cast<int64_t>(lengths_.size());
    auto generator = at::make_generator<at::CPUGeneratorImpl>(
        static_cast<uint64_t>(seed) * 1000003u + static_cast<uint64_t>(epoch));
    const auto order = at::randperm(count, generator);
    const auto* shuffled = order.data_ptr<int64_t>();
    const int64_t per_rank = (count + world_size - 1) / world_size;
    for (int64_t k = 0; k < per_rank; ++k)
      mine_.push_back(shuffled[(k * world_size + rank) % count]);
  }

  // Batches in the epoch: the same on every rank.
  int64_t batches() const {
    return (static_cast<int64_t>(mine_.size()) + batch_size_ - 1) / batch_size_;
  }

  // The steps the epoch runs one after another on every rank: the ranks wait for each other at
  // every batch, so each batch costs the longest of its ranks' t_max.
  static int64_t sequential_steps(const std::vector<int64_t>& lengths, int64_t batch_size,
                                  int64_t world_size, int64_t seed, int64_t epoch) {
    std::vector<PaddedSampler> ranks;
    for (int64_t rank = 0; rank < world_size; ++rank)
      ranks.emplace_back(lengths, batch_size, world_size, rank, seed, epoch);
    int64_t steps = 0;
    for (int64_t batch = 0; batch < ranks[0].batches(); ++batch) {
      int64_t longest = 0;
      for (auto& rank : ranks) longest = std::max(longest, rank.next()->t_max);
      steps += longest;
    }
    return steps;
  }

  void reset(std::optional<size_t> = std::nullopt) override { next_ = 0; }

  std::optional<bload::BatchRequest> next(size_t = 1) override {
    if (next_ >= mine_.size()) return std::nullopt;
    const size_t end = std::min(mine_.size(), next_ + static_cast<size_t>(batch_size_));
    bload::BatchRequest request;
    request.blocks = static_cast<int64_t>(end - next_);
    request.table = at::zeros({request.blocks, bload::kTableColumns}, at::kLong);
    auto cells = request.table.accessor<int64_t, 2>();
    for (int64_t row = 0; row < request.blocks; ++row, ++next_) {
      const int64_t sequence = mine_[next_], length = lengths_[sequence];
      cells[row][bload::kBlock] = row;
      cells[row][bload::kLength] = cells[row][bload::kSequenceLength] = length;
      cells[row][bload::kSequence] = sequence;
      request.t_max = std::max(request.t_max, length);  // the batch's longest
    }
    return request;
  }

  // Epochs of this loop start over; it has no position worth saving.
  void save(torch::serialize::OutputArchive&) const override {
    TORCH_CHECK(false, "--loop padded does not checkpoint");
  }
  void load(torch::serialize::InputArchive&) override {
    TORCH_CHECK(false, "--loop padded does not checkpoint");
  }

 private:
  std::vector<int64_t> lengths_;
  int64_t batch_size_;
  std::vector<int64_t> mine_;  // this rank's sequences, in the order it trains them
  size_t next_ = 0;
};

}  // namespace trainer
