#include "bload/sampler.h"

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <mutex>

namespace bload {

struct EpochHandle::State {
  std::mutex mutex;
  std::optional<int64_t> requested;
  int64_t current = -1;
};

EpochHandle::EpochHandle() : state_(std::make_shared<State>()) {}

void EpochHandle::set_epoch(int64_t epoch) {
  TORCH_CHECK(epoch >= 0, "epoch = ", epoch, ": expected an epoch of at least 0");
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->requested = epoch;
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
}

void BlockSampler::reset(std::optional<size_t> new_size) {
  if (new_size) {
    TORCH_CHECK(static_cast<int64_t>(*new_size) == planner_.num_sequences(), "new_size = ",
                *new_size, ": expected the number of sequences the sampler was built with (",
                planner_.num_sequences(), ")");
  }
  if (resume_on_reset_) {
    resume_on_reset_ = false;
    return;
  }
  int64_t epoch = next_epoch_;
  {
    std::lock_guard<std::mutex> lock(handle_.state_->mutex);
    if (handle_.state_->requested) {
      epoch = *handle_.state_->requested;
      handle_.state_->requested.reset();
    }
    handle_.state_->current = epoch;
  }
  plan_ = planner_.plan(epoch);
  next_epoch_ = epoch + 1;
  position_ = 0;
}

std::optional<BatchRequest> BlockSampler::next(size_t /*batch_size*/) {
  const auto& current = plan();
  if (position_ >= current.batches_per_rank()) {
    return std::nullopt;
  }
  return current.batch(rank_, position_++);
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

// Archive keys. The version changes whenever the meaning of the state does.
namespace {
constexpr int64_t kArchiveVersion = 1;
constexpr const char* kPrefix = "bload_sampler.";

// Every option a plan depends on, and the lengths' fingerprint, as (name, value) pairs.
std::vector<std::pair<std::string, c10::IValue>> plan_identity(const Planner& planner) {
  std::vector<std::pair<std::string, c10::IValue>> identity{
      {"sequences", planner.num_sequences()},
      {"lengths_hash", static_cast<int64_t>(planner.lengths_hash())},
  };
  for (auto& option : plan_options_by_name(planner.options())) identity.push_back(std::move(option));
  return identity;
}

c10::IValue read_entry(torch::serialize::InputArchive& archive, const std::string& name) {
  c10::IValue value;
  bool found = false;
  try {
    found = archive.try_read(kPrefix + name, value);
  } catch (const c10::Error&) {
    found = false;
  }
  TORCH_CHECK(found, "bload::BlockSampler::load: the archive has no '", kPrefix, name,
              "': expected an archive written by bload::BlockSampler::save");
  return value;
}

int64_t read_int(torch::serialize::InputArchive& archive, const std::string& name) {
  auto value = read_entry(archive, name);
  TORCH_CHECK(value.isInt(), "bload::BlockSampler::load: '", kPrefix, name,
              "' holds a ", value.tagKind(), ": expected an int (a corrupted archive?)");
  return value.toInt();
}
}  // namespace

void BlockSampler::save(torch::serialize::OutputArchive& archive) const {
  archive.write(std::string(kPrefix) + "version", kArchiveVersion);
  for (const auto& [name, value] : plan_identity(planner_)) {
    archive.write(kPrefix + name, value);
  }
  archive.write(std::string(kPrefix) + "epoch", epoch());
  archive.write(std::string(kPrefix) + "position", position_);
  archive.write(std::string(kPrefix) + "next_epoch", next_epoch_);
}

void BlockSampler::load(torch::serialize::InputArchive& archive) {
  const int64_t version = read_int(archive, "version");
  TORCH_CHECK(version == kArchiveVersion, "bload::BlockSampler::load: archive version = ",
              version, ": expected ", kArchiveVersion);
  for (const auto& [name, expected] : plan_identity(planner_)) {
    auto saved = read_entry(archive, name);
    TORCH_CHECK(saved == expected, "bload::BlockSampler::load: ", name, " = ", saved,
                " in the archive: expected ", expected,
                " as this sampler has; the archive was saved with other lengths or options");
  }
  const int64_t epoch = read_int(archive, "epoch");
  const int64_t position = read_int(archive, "position");
  const int64_t next_epoch = read_int(archive, "next_epoch");
  TORCH_CHECK(epoch >= -1 && next_epoch >= 0, "bload::BlockSampler::load: epoch = ", epoch,
              ", next_epoch = ", next_epoch, ": expected epochs of at least 0 (a corrupted archive?)");
  std::optional<EpochPlan> plan;
  if (epoch >= 0) {
    plan = planner_.plan(epoch);
    TORCH_CHECK(position >= 0 && position <= plan->batches_per_rank(),
                "bload::BlockSampler::load: position = ", position, ": expected 0 to ",
                plan->batches_per_rank(), " batches of epoch ", epoch, " (a corrupted archive?)");
  }
  plan_ = std::move(plan);
  position_ = position;
  next_epoch_ = next_epoch;
  resume_on_reset_ = plan_.has_value();
  std::lock_guard<std::mutex> lock(handle_.state_->mutex);
  handle_.state_->current = epoch;
}

}  // namespace bload
