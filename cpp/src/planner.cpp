// The C++ planner: bload::Planner and EpochPlan over the Rust core's, through the bridge.

#include "bload/planner.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "rust_bridge.h"

namespace bload {

Options::Options(int64_t t_max) : plan(ffi::default_plan_options(t_max)) {}

Options& Options::policy(const std::string& name) {
  plan.policy = rethrowing([&] { return ffi::policy_code(name); });
  return *this;
}

Options& Options::cost(const std::string& name) {
  plan.cost = rethrowing([&] { return ffi::cost_code(name); });
  return *this;
}

std::string Options::cost() const {
  return std::string(rethrowing([&] { return ffi::cost_of_code(plan.cost); }));
}

std::string Options::policy() const {
  return std::string(rethrowing([&] { return ffi::policy_of_code(plan.policy); }));
}

std::vector<std::pair<std::string, c10::IValue>> plan_options_by_name(const Options& o) {
  return {
      {"t_max", o.t_max()},
      {"blocks_per_batch", o.blocks_per_batch()},
      {"world_size", o.world_size()},
      {"seed", o.seed()},
      {"policy", o.policy()},
      {"split_oversized", o.split_oversized()},
      {"cost", o.cost()},
      {"max_pieces", o.max_pieces()},
  };
}

std::string plan_options_to_json(const Options& options) {
  return std::string(rethrowing([&] { return ffi::plan_options_to_json(options.plan); }));
}

Options options_from_json(const std::string& text) {
  Options options;
  options.plan = rethrowing([&] { return ffi::plan_options_from_json(text); });
  return options;
}

struct Planner::Impl {
  rust::Box<ffi::Planner> planner;
  Options options;
};

struct EpochPlan::Impl {
  rust::Box<ffi::EpochPlan> plan;
  Options options;
  int64_t sequences;  // the planner's, for each BatchRequest (a dataset checks its size with it)
};

Planner::Planner(c10::ArrayRef<int64_t> lengths, const Options& options) {
  auto planner = rethrowing([&] {
    return ffi::new_planner(rust::Slice<const int64_t>(lengths.data(), lengths.size()),
                            options.plan);
  });
  impl_ = std::make_shared<const Impl>(Impl{std::move(planner), options});
}

Planner::Planner(c10::ArrayRef<int32_t> lengths, const Options& options) {
  auto planner = rethrowing([&] {
    return ffi::new_planner_from_i32(rust::Slice<const int32_t>(lengths.data(), lengths.size()),
                                     options.plan);
  });
  impl_ = std::make_shared<const Impl>(Impl{std::move(planner), options});
}

EpochPlan Planner::plan(int64_t epoch) const {
  auto plan = rethrowing([&] { return impl_->planner->plan_epoch(epoch); });
  return EpochPlan(std::make_shared<const EpochPlan::Impl>(
      EpochPlan::Impl{std::move(plan), impl_->options, num_sequences()}));
}

Resumed Planner::resume(const EpochPosition& at) const {
  auto resumed = rethrowing([&] { return impl_->planner->resume_epoch(at); });
  auto plan = std::make_shared<const EpochPlan::Impl>(
      EpochPlan::Impl{std::move(resumed.plan), impl_->options, num_sequences()});
  return Resumed{EpochPlan(std::move(plan)), resumed.batches};
}

Planner::Planner(const std::vector<Source>& sources, const Options& options) {
  std::vector<int64_t> lengths, sizes;
  std::vector<double> weights;
  rust::Vec<rust::String> names;
  for (size_t s = 0; s < sources.size(); ++s) {
    const auto& source = sources[s];
    lengths.insert(lengths.end(), source.lengths.begin(), source.lengths.end());
    sizes.push_back(static_cast<int64_t>(source.lengths.size()));
    weights.push_back(source.weight);
    // rust::String refuses text that is not UTF-8 with its own exception: named here instead.
    try {
      names.push_back(rust::String(source.name));
    } catch (const std::exception&) {
      TORCH_CHECK(false, "sources[", s, "].name: expected UTF-8 text");
    }
  }
  auto planner = rethrowing([&] {
    return ffi::new_mixture_planner(rust::Slice<const int64_t>(lengths.data(), lengths.size()),
                                    rust::Slice<const int64_t>(sizes.data(), sizes.size()),
                                    rust::Slice<const double>(weights.data(), weights.size()),
                                    std::move(names), options.plan);
  });
  impl_ = std::make_shared<const Impl>(Impl{std::move(planner), options});
}

Planner Planner::from_sources_json(c10::ArrayRef<int64_t> lengths, const std::string& sources,
                                   const Options& options) {
  auto planner = rethrowing([&] {
    return ffi::new_planner_from_sources_json(
        rust::Slice<const int64_t>(lengths.data(), lengths.size()), sources, options.plan);
  });
  Planner made;
  made.impl_ = std::make_shared<const Impl>(Impl{std::move(planner), options});
  return made;
}

std::string Planner::sources_json() const { return std::string(impl_->planner->sources_json()); }

std::string Planner::mixture() const { return std::string(impl_->planner->mixture_text()); }

uint64_t Planner::mixture_hash() const { return impl_->planner->mixture_hash(); }

std::vector<std::string> Planner::source_names() const {
  std::vector<std::string> names;
  for (const auto& name : impl_->planner->source_names()) names.emplace_back(std::string(name));
  return names;
}

std::vector<int64_t> Planner::source_starts() const {
  const auto starts = impl_->planner->source_starts();
  return std::vector<int64_t>(starts.begin(), starts.end());
}

std::pair<int64_t, int64_t> Planner::source_of(int64_t index) const {
  const auto starts = source_starts();
  TORCH_CHECK(index >= 0 && index < starts.back(), "index = ", index,
              ": expected a sequence from 0 to ", starts.back() - 1, ", the sequences planned");
  const auto source = std::upper_bound(starts.begin(), starts.end(), index) - starts.begin() - 1;
  return {source, index - starts[static_cast<size_t>(source)]};
}

std::vector<SourceStats> Planner::source_stats(int64_t epoch) const {
  std::vector<SourceStats> stats;
  for (const auto& s : rethrowing([&] { return impl_->planner->source_stats(epoch); })) {
    stats.push_back(
        SourceStats{std::string(s.name), s.weight_share, static_cast<int64_t>(s.source_sequences),
                    static_cast<int64_t>(s.sequences), static_cast<int64_t>(s.steps), s.share,
                    static_cast<int64_t>(s.repeats), static_cast<int64_t>(s.left_out)});
  }
  return stats;
}

std::string Planner::write_shared_plan(int64_t epoch, const std::string& dir) const {
  return std::string(rethrowing([&] { return impl_->planner->write_shared_plan(epoch, dir); }));
}

EpochPlan Planner::map_shared_plan(int64_t epoch, const std::string& dir, double timeout_s) const {
  auto plan = rethrowing([&] { return impl_->planner->map_shared_plan(epoch, dir, timeout_s); });
  return EpochPlan(std::make_shared<const EpochPlan::Impl>(
      EpochPlan::Impl{std::move(plan), impl_->options, num_sequences()}));
}

namespace {

// A node's ranks are numbered from 0: a negative one would wait, as a reader, for a writer that
// is not coming (Python refuses it as C++ does, naming it).
void check_local_rank(int64_t local_rank) {
  TORCH_CHECK(local_rank >= 0, "local_rank = ", local_rank,
              ": expected the rank's number on its node, at least 0 (0 writes the shared plan)");
}

}  // namespace

EpochPlan Planner::plan_for_node(int64_t epoch) const {
  const auto& options = impl_->options;
  if (options.shared_plan_dir().empty()) return plan(epoch);
  check_local_rank(options.local_rank());
  if (options.local_rank() == 0) write_shared_plan(epoch, options.shared_plan_dir());
  return map_shared_plan(epoch, options.shared_plan_dir(), options.shared_plan_timeout());
}

Planner Planner::from_shared_plan(const Options& options, int64_t epoch, const std::string& dir,
                                  double timeout_s) {
  auto planner = rethrowing(
      [&] { return ffi::planner_from_shared_plan(options.plan, epoch, dir, timeout_s); });
  return Planner(std::make_shared<const Impl>(Impl{std::move(planner), options}));
}

Planner Planner::with_lengths_of(const EpochPlan& plan) const {
  auto planner = rethrowing([&] { return impl_->planner->with_lengths_of(*plan.impl_->plan); });
  return Planner(std::make_shared<const Impl>(Impl{std::move(planner), impl_->options}));
}

int64_t Planner::private_bytes() const {
  return static_cast<int64_t>(impl_->planner->planner_private_bytes());
}

const Options& Planner::options() const { return impl_->options; }

int64_t Planner::num_sequences() const {
  return static_cast<int64_t>(impl_->planner->lengths().size());
}

c10::ArrayRef<uint32_t> Planner::lengths() const {
  const auto lengths = impl_->planner->lengths();
  return c10::ArrayRef<uint32_t>(lengths.data(), lengths.size());
}

uint64_t Planner::lengths_hash() const { return impl_->planner->lengths_hash(); }

SamplerState Planner::sampler_state(const std::optional<EpochPosition>& position,
                                    int64_t next_epoch) const {
  const auto at = position.value_or(EpochPosition{});
  auto fields = rethrowing(
      [&] { return impl_->planner->sampler_state(position.has_value(), at, next_epoch); });
  SamplerState state;
  for (const auto& field : fields) {
    c10::IValue value;
    if (field.kind == ffi::StateKind::Bool) {
      value = field.int_value != 0;
    } else if (field.kind == ffi::StateKind::Text) {
      value = std::string(field.text);
    } else {
      value = field.int_value;
    }
    state.emplace_back(std::string(field.name), std::move(value));
  }
  return state;
}

ResumedState Planner::resume_state(const SamplerState& state, const std::string& prefix,
                                   const std::string& suffix) const {
  return resume_shared_state(state, prefix, suffix, "", 0, 0.0);
}

ResumedState Planner::resume_shared_state(const SamplerState& state, const std::string& prefix,
                                          const std::string& suffix,
                                          const std::string& shared_plan_dir, int64_t local_rank,
                                          double timeout_s) const {
  if (!shared_plan_dir.empty()) check_local_rank(local_rank);
  std::vector<ffi::StateField> fields;
  // rust::String refuses text that is not UTF-8 with its own exception: named here instead.
  auto text = [&](const std::string& name, const std::string& value) {
    try {
      return rust::String(value);
    } catch (const std::exception&) {
      TORCH_CHECK(false, prefix, name, suffix, " holds text that is not UTF-8 (a corrupted state)");
    }
  };
  for (const auto& [name, value] : state) {
    ffi::StateField field{text(name, name), ffi::StateKind::Int, 0, ""};
    if (value.isInt()) {
      field.int_value = value.toInt();
    } else if (value.isBool()) {
      field.kind = ffi::StateKind::Bool;
      field.int_value = value.toBool();
    } else {
      TORCH_CHECK(value.isString(), prefix, name, suffix, " holds a ", value.tagKind(),
                  ": expected an int, a bool or a string (a corrupted state)");
      field.kind = ffi::StateKind::Text;
      field.text = text(name, value.toStringRef());
    }
    fields.push_back(std::move(field));
  }
  auto read = rethrowing([&] {
    return impl_->planner->read_sampler_state(
        rust::Slice<const ffi::StateField>(fields.data(), fields.size()), prefix, suffix,
        shared_plan_dir, local_rank == 0, timeout_s);
  });
  ResumedState resumed{std::nullopt, read->next_epoch()};
  if (read->started()) {
    auto plan = rethrowing([&] { return read->take_plan(); });
    resumed.resumed = Resumed{EpochPlan(std::make_shared<const EpochPlan::Impl>(EpochPlan::Impl{
                                  std::move(plan), impl_->options, num_sequences()})),
                              read->batches()};
  }
  return resumed;
}

int64_t EpochPlan::epoch() const { return static_cast<int64_t>(impl_->plan->epoch()); }

int64_t EpochPlan::batches_per_rank() const {
  return static_cast<int64_t>(impl_->plan->batches_per_rank());
}

bool EpochPlan::carries_state() const { return impl_->plan->carries_state(); }

BatchRequest EpochPlan::batch(int64_t rank, int64_t index) const {
  auto cells = rethrowing([&] { return impl_->plan->batch_table(rank, index); });
  const auto rows = static_cast<int64_t>(cells.size()) / kTableColumns;
  auto table = at::empty({rows, kTableColumns}, at::kLong);
  std::copy(cells.begin(), cells.end(), table.mutable_data_ptr<int64_t>());
  const auto& options = impl_->options;
  return BatchRequest{.table = table,
                      .blocks = options.blocks_per_batch(),
                      .t_max = options.t_max(),
                      .carry = carries_state(),
                      .first_lane = rank * options.blocks_per_batch(),
                      .sequences = impl_->sequences,
                      .index = index};
}

GlobalBatch EpochPlan::global_batch(int64_t index) const {
  return rethrowing([&] { return impl_->plan->global_batch(index); });
}

int64_t default_read_ahead() { return ffi::read_ahead_bounds()[0]; }
int64_t max_read_ahead() { return ffi::read_ahead_bounds()[1]; }

PlanStats EpochPlan::stats() const { return impl_->plan->stats(); }

std::vector<std::pair<std::string, int64_t>> EpochPlan::counts() const {
  std::vector<std::pair<std::string, int64_t>> counts;
  for (const auto& count : impl_->plan->stat_counts()) {
    counts.emplace_back(std::string(count.name), static_cast<int64_t>(count.value));
  }
  return counts;
}

uint64_t EpochPlan::hash() const { return impl_->plan->plan_hash(); }

EpochPosition EpochPlan::position(int64_t batches) const {
  return rethrowing([&] { return impl_->plan->position(batches); });
}

int64_t EpochPlan::private_bytes() const {
  return static_cast<int64_t>(impl_->plan->plan_private_bytes());
}

bool EpochPlan::shared() const { return impl_->plan->is_shared(); }

std::vector<int64_t> read_lengths(const std::string& path) { return read_lengths(path, ""); }

std::vector<int64_t> read_lengths(const std::string& path, const std::string& format) {
  auto lengths = rethrowing([&] { return ffi::read_lengths_file(path, format); });
  return std::vector<int64_t>(lengths.begin(), lengths.end());
}

std::string lengths_format(const std::string& path) {
  return rethrowing([&] { return std::string(ffi::detect_lengths_format(path)); });
}

}  // namespace bload
