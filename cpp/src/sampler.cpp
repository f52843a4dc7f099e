// bload::BlockSampler: epochs, the epoch handle and the batches of one rank (save and load are
// in sampler_archive.cpp).

#include "bload/sampler.h"

#include <algorithm>
#include <mutex>
#include <utility>

namespace bload {

struct EpochHandle::State {
  std::mutex mutex;
  std::optional<int64_t> requested;
  int64_t current = -1;
  // Whether an epoch other than `current` was set since it started or was loaded: as in
  // Python, where setting it starts that epoch, the loaded one set again then starts over.
  bool left_current = false;
};

EpochHandle::EpochHandle() : state_(std::make_shared<State>()) {}

void EpochHandle::set_epoch(int64_t epoch) {
  TORCH_CHECK(epoch >= 0 && epoch <= kMaxEpoch, "epoch = ", epoch, ": expected an epoch from 0 to ",
              kMaxEpoch, " (the sampler goes on to the epoch after it)");
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->requested = epoch;
  if (epoch != state_->current) state_->left_current = true;
}

int64_t EpochHandle::epoch() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->current;
}

BlockSampler::BlockSampler(const std::vector<int64_t>& lengths, const Options& options)
    : BlockSampler(Planner(lengths, options), options.rank()) {}

BlockSampler::BlockSampler(Planner planner, int64_t rank)
    : planner_(std::move(planner)), rank_(rank) {
  const int64_t world_size = planner_.options().world_size();
  TORCH_CHECK(rank >= 0 && rank < world_size, "rank = ", rank,
              ": expected a rank from 0 to world_size - 1 = ", world_size - 1);
  const int64_t read_ahead = planner_.options().read_ahead();
  TORCH_CHECK(read_ahead >= 0 && read_ahead <= max_read_ahead(), "read_ahead = ", read_ahead,
              ": expected an int from 0 (no read-ahead) to ", max_read_ahead());
}

void BlockSampler::reset(std::optional<size_t> new_size) {
  if (new_size) {
    TORCH_CHECK(static_cast<int64_t>(*new_size) == planner_.num_sequences(),
                "new_size = ", *new_size,
                ": expected the number of sequences the sampler was built with (",
                planner_.num_sequences(), ")");
  }
  ++pass_;
  int64_t epoch = next_epoch_;
  {
    std::lock_guard<std::mutex> lock(handle_.state_->mutex);
    auto& requested = handle_.state_->requested;
    if (std::exchange(resume_on_reset_, false)) {
      // The loaded epoch goes on unless another was set after the load, or the same one, served
      // whole, set again (it then starts over): the rule of Python's sampler.
      const bool served = position_ >= plan_->batches_per_rank();
      const bool left = handle_.state_->left_current;
      if (!requested || (!left && *requested == plan_->epoch() && !served)) {
        requested.reset();
        handle_.state_->left_current = false;
        return;
      }
    }
    if (requested) epoch = *requested;
    // Only after epoch kMaxEpoch, as set_epoch and load() refuse anything later.
    TORCH_CHECK(epoch <= kMaxEpoch, "bload::BlockSampler::reset: epoch = ", epoch,
                ": expected an epoch from 0 to ", kMaxEpoch, "; epoch ", kMaxEpoch,
                " was the last, as the sampler goes on to the epoch after each");
    handle_.state_->requested.reset();
    handle_.state_->current = epoch;
    handle_.state_->left_current = false;
  }
  plan_ = planner_.plan_for_node(epoch);
  // A shared plan's lengths replace the planner's own: it then holds only its tables.
  if (plan_->shared()) planner_ = planner_.with_lengths_of(*plan_);
  next_epoch_ = epoch + 1;
  position_ = 0;
}

std::optional<BatchRequest> BlockSampler::next(size_t batch_size) {
  const int64_t blocks = planner_.options().blocks_per_batch();
  TORCH_CHECK(batch_size == 1 || static_cast<int64_t>(batch_size) == blocks,
              "bload::BlockSampler: batch_size = ", batch_size,
              ": expected 1 (the DataLoader's default) or blocks_per_batch = ", blocks,
              ": a bload batch is always blocks_per_batch blocks; set blocks_per_batch in "
              "bload::Options, not the DataLoader's batch_size");
  const auto& current = plan();
  if (position_ >= current.batches_per_rank()) {
    return std::nullopt;
  }
  auto request = current.batch(rank_, position_);
  request.global = current.global_batch(position_);
  request.pass = pass_;
  request.read_ahead = planner_.options().read_ahead();
  const int64_t last = std::min(position_ + request.read_ahead, current.batches_per_rank() - 1);
  for (int64_t index = position_ + 1; index <= last; ++index) {
    request.ahead.push_back(current.batch(rank_, index).table);
  }
  ++position_;
  return request;
}

const EpochPlan& BlockSampler::plan() {
  if (!plan_) {
    resume_on_reset_ = false;
    reset();
  }
  return *plan_;
}

int64_t BlockSampler::batches_per_rank() { return plan().batches_per_rank(); }

int64_t BlockSampler::epoch() const { return plan_ ? plan_->epoch() : -1; }

void BlockSampler::restore(std::optional<EpochPlan> plan, int64_t position, int64_t next_epoch) {
  const int64_t epoch = plan ? plan->epoch() : -1;
  plan_ = std::move(plan);
  position_ = position;
  next_epoch_ = next_epoch;
  resume_on_reset_ = plan_.has_value();
  ++pass_;
  std::lock_guard<std::mutex> lock(handle_.state_->mutex);
  handle_.state_->current = epoch;
  // An epoch set before the load gives way to the state, except a later one set while the
  // state has nothing left of its epoch (saved after its last batch): a loop that loads such a
  // state and sets the next epoch, in either order, serves that epoch, not an empty rest.
  auto& requested = handle_.state_->requested;
  const bool served = plan_ && position_ >= plan_->batches_per_rank();
  if (requested && !(served && *requested > epoch)) requested.reset();
  handle_.state_->left_current = requested.has_value();
}

}  // namespace bload
