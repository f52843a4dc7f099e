// The only C++ file that talks to Rust: it wraps cpp/bridge's types and turns the Rust errors
// (rust::Error) into c10::Error, so that C++ callers catch torch's error type and Python sees a
// RuntimeError with the Rust message.

#include "bload/planner.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "bload-cxx/src/lib.rs.h"
#include "rust/cxx.h"

namespace bload {
namespace {

// Calls into Rust, rethrowing its errors as c10::Error.
template <typename Call>
auto rethrowing(Call&& call) -> decltype(call()) {
  try {
    return call();
  } catch (const ::rust::Error& error) {
    TORCH_CHECK(false, error.what());
  }
}

ffi::PlanOptions to_bridge(const Options& options) {
  return ffi::PlanOptions{
      options.t_max(),          options.blocks_per_batch(), options.world_size(),
      options.seed(),           rust::String(options.policy()), options.split_oversized(),
  };
}

}  // namespace

struct Planner::Impl {
  rust::Box<ffi::Planner> planner;
  Options options;
};

struct EpochPlan::Impl {
  rust::Box<ffi::EpochPlan> plan;
  Options options;
};

Planner::Planner(const std::vector<int64_t>& lengths, const Options& options) {
  auto planner = rethrowing([&] {
    return ffi::new_planner(rust::Slice<const int64_t>(lengths.data(), lengths.size()),
                            to_bridge(options));
  });
  impl_ = std::make_shared<const Impl>(Impl{std::move(planner), options});
}

EpochPlan Planner::plan(int64_t epoch) const {
  auto plan = rethrowing([&] { return impl_->planner->plan_epoch(epoch); });
  return EpochPlan(std::make_shared<const EpochPlan::Impl>(
      EpochPlan::Impl{std::move(plan), impl_->options}));
}

const Options& Planner::options() const { return impl_->options; }

int64_t Planner::num_sequences() const {
  return static_cast<int64_t>(impl_->planner->lengths().size());
}

uint64_t Planner::lengths_hash() const { return impl_->planner->lengths_hash(); }

int64_t EpochPlan::epoch() const { return static_cast<int64_t>(impl_->plan->epoch()); }

int64_t EpochPlan::batches_per_rank() const {
  return static_cast<int64_t>(impl_->plan->batches_per_rank());
}

BlockTable EpochPlan::batch(int64_t rank, int64_t index) const {
  auto rows = rethrowing([&] { return impl_->plan->batch_pieces(rank, index); });
  auto table = at::empty({static_cast<int64_t>(rows.size()), kTableColumns}, at::kLong);
  auto cells = table.accessor<int64_t, 2>();
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    cells[i][kBlock] = row.block;
    cells[i][kBlockOffset] = row.block_offset;
    cells[i][kLength] = row.length;
    cells[i][kSequence] = row.sequence;
    cells[i][kOffset] = row.offset;
    cells[i][kSequenceLength] = row.sequence_length;
  }
  return BlockTable{table, impl_->options.blocks_per_batch(), impl_->options.t_max()};
}

PlanStats EpochPlan::stats() const {
  auto s = impl_->plan->summary();
  auto i = [](uint64_t count) { return static_cast<int64_t>(count); };
  return PlanStats{i(s.sequences),       i(s.steps),           i(s.pieces),
                   i(s.blocks),          i(s.padding),         i(s.deleted),
                   i(s.split_sequences), i(s.split_pieces),    i(s.rounding_blocks),
                   i(s.rounding_padding), i(s.empty_blocks),   i(s.lower_bound_blocks),
                   i(s.lower_bound_padding)};
}

uint64_t EpochPlan::hash() const { return impl_->plan->plan_hash(); }

std::vector<int64_t> read_lengths(const std::string& path) {
  auto lengths = rethrowing([&] { return ffi::read_lengths_file(path); });
  return std::vector<int64_t>(lengths.begin(), lengths.end());
}

}  // namespace bload
