// torch.classes.bload.Planner: the planner for Python and TorchScript, as tensors.
//
//   planner = torch.classes.bload.Planner(lengths, t_max=94, world_size=2)
//   for b in range(planner.batches_per_rank(epoch)):
//       table = planner.batch(epoch, rank, b)   # int64 [pieces, 6], see TableColumn
//
// and torch.classes.bload.EpochPlan, one epoch's plan as planner.plan(epoch) returns it, or as
// planner.resume(position) does to go on with an epoch part-way, on the same world size or
// another; a position is a dict of the core's EpochPosition fields (script_position.h). Both
// classes stay in this file's anonymous namespace: with names of their own, torch's templates
// instantiated for them would be exported from libbload.so.

#include <ATen/ATen.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bload/agreement.h"
#include "bload/planner.h"
#include "ops/checks.h"
#include "script_position.h"

namespace bload::script {
namespace {

// The core's planner of `lengths`, a 1-d integer tensor, read in place where it is a contiguous
// int32 or int64 host tensor (the core keeps its own 32 bits a sequence), converted once
// otherwise.
Planner planner_of(const at::Tensor& lengths, const Options& options) {
  ops::check_lengths(lengths, "lengths");
  if (lengths.scalar_type() == at::kInt) {
    auto host = lengths.to(at::kCPU).contiguous();
    return Planner(c10::ArrayRef<int32_t>(host.const_data_ptr<int32_t>(), host.numel()), options);
  }
  auto host = lengths.to(at::kCPU, at::kLong).contiguous();
  return Planner(c10::ArrayRef<int64_t>(host.const_data_ptr<int64_t>(), host.numel()), options);
}

// The options every constructor of the class takes, in the order it takes them.
Options options_of(int64_t t_max, int64_t blocks_per_batch, int64_t world_size, int64_t seed,
                   const std::string& policy, bool split_oversized, const std::string& cost,
                   int64_t max_pieces) {
  return Options(t_max)
      .blocks_per_batch(blocks_per_batch)
      .world_size(world_size)
      .seed(seed)
      .policy(policy)
      .split_oversized(split_oversized)
      .cost(cost)
      .max_pieces(max_pieces);
}

// The pickled state: the lengths, and the plan options as the core's JSON.
using PlannerState = std::tuple<at::Tensor, std::string>;

// torch.classes.bload.EpochPlan: one epoch's plan (shared and immutable, like bload::EpochPlan).
class ScriptEpochPlan : public torch::CustomClassHolder {
 public:
  explicit ScriptEpochPlan(EpochPlan plan) : plan_(std::move(plan)) {}

  int64_t epoch() { return plan_.epoch(); }
  int64_t batches_per_rank() { return plan_.batches_per_rank(); }
  bool carries_state() { return plan_.carries_state(); }
  at::Tensor batch(int64_t rank, int64_t index) { return plan_.batch(rank, index).table; }
  std::tuple<int64_t, int64_t, double, double> global_batch(int64_t index) {
    const auto g = plan_.global_batch(index);
    return {g.valid, g.pieces, g.loss_scale, g.shifted_loss_scale};
  }
  c10::Dict<std::string, int64_t> stats() {
    c10::Dict<std::string, int64_t> dict;
    for (const auto& [name, value] : plan_.counts()) dict.insert(name, value);
    return dict;
  }
  // PlanStats::rank_cost_imbalance (floats, which the counts' dict does not hold).
  std::tuple<double, double> rank_cost_imbalance() {
    const auto stats = plan_.stats();
    return {stats.rank_cost_imbalance_mean, stats.rank_cost_imbalance_worst};
  }
  int64_t plan_hash() { return static_cast<int64_t>(plan_.hash()); }
  PositionDict position(int64_t batches) { return dict_of(plan_.position(batches)); }
  int64_t private_bytes() { return plan_.private_bytes(); }
  bool shared() { return plan_.shared(); }

 private:
  EpochPlan plan_;
};

class ScriptPlanner : public torch::CustomClassHolder {
 public:
  ScriptPlanner(at::Tensor lengths, int64_t t_max, int64_t blocks_per_batch, int64_t world_size,
                int64_t seed, std::string policy, bool split_oversized, std::string cost,
                int64_t max_pieces)
      : ScriptPlanner(lengths, options_of(t_max, blocks_per_batch, world_size, seed, policy,
                                          split_oversized, cost, max_pieces)) {}

  ScriptPlanner(const at::Tensor& lengths, const Options& options)
      : planner_(planner_of(lengths, options)) {}
  explicit ScriptPlanner(Planner planner) : planner_(std::move(planner)) {}

  // A mixture of sources (docs/mixtures.md): source s is lengths[s] with weights[s] and names[s]
  // ("" names it by its index).
  static c10::intrusive_ptr<ScriptPlanner> of_sources(
      c10::List<at::Tensor> lengths, std::vector<double> weights, std::vector<std::string> names,
      int64_t t_max, int64_t blocks_per_batch, int64_t world_size, int64_t seed, std::string policy,
      bool split_oversized, std::string cost, int64_t max_pieces) {
    TORCH_CHECK(weights.size() == lengths.size() && names.size() == lengths.size(),
                "sources: ", lengths.size(), " lengths, ", weights.size(), " weights and ",
                names.size(), " names: expected a weight and a name for each source's lengths");
    std::vector<Source> sources;
    for (size_t s = 0; s < lengths.size(); ++s) {
      const at::Tensor tensor = lengths.get(s);
      ops::check_lengths(tensor, "sources[" + std::to_string(s) + "].lengths");
      const auto host = tensor.to(at::kCPU, at::kLong).contiguous();
      const auto* data = host.const_data_ptr<int64_t>();
      sources.push_back(
          Source{names[s], std::vector<int64_t>(data, data + host.numel()), weights[s]});
    }
    const auto options = options_of(t_max, blocks_per_batch, world_size, seed, policy,
                                    split_oversized, cost, max_pieces);
    return c10::make_intrusive<ScriptPlanner>(Planner(sources, options));
  }

  std::string mixture() const { return planner().mixture(); }
  std::vector<int64_t> source_starts() const { return planner().source_starts(); }
  std::vector<std::string> source_names() const { return planner().source_names(); }
  // Each source's part of `epoch`: (name, weight_share, source_sequences, sequences, steps,
  // share, repeats, left_out), the fields of bload::SourceStats in order.
  std::vector<std::tuple<std::string, double, int64_t, int64_t, int64_t, double, int64_t, int64_t>>
  source_stats(int64_t epoch) const {
    std::vector<
        std::tuple<std::string, double, int64_t, int64_t, int64_t, double, int64_t, int64_t>>
        rows;
    for (const auto& s : planner().source_stats(epoch)) {
      rows.emplace_back(s.name, s.weight_share, s.source_sequences, s.sequences, s.steps, s.share,
                        s.repeats, s.left_out);
    }
    return rows;
  }

  int64_t batches_per_rank(int64_t epoch) { return cached(epoch).batches_per_rank(); }
  int64_t num_sequences() const { return planner().num_sequences(); }

  at::Tensor batch(int64_t epoch, int64_t rank, int64_t index) {
    return cached(epoch).batch(rank, index).table;
  }

  c10::Dict<std::string, int64_t> stats(int64_t epoch) { return plan(epoch)->stats(); }

  int64_t plan_hash(int64_t epoch) { return static_cast<int64_t>(cached(epoch).hash()); }

  c10::intrusive_ptr<ScriptEpochPlan> plan(int64_t epoch) {
    return c10::make_intrusive<ScriptEpochPlan>(cached(epoch));
  }

  std::string write_shared_plan(int64_t epoch, std::string dir) {
    return planner().write_shared_plan(epoch, dir);
  }

  // The shared plan of `epoch` becomes the planner's cached one: agreement() and
  // check_agreement() then hash the plan the rank serves. Its lengths, mapped, replace the
  // planner's own (Planner::with_lengths_of), which it then no longer holds.
  c10::intrusive_ptr<ScriptEpochPlan> map_shared_plan(int64_t epoch, std::string dir,
                                                      double timeout_s) {
    return serve_shared(planner().map_shared_plan(epoch, dir, timeout_s));
  }

  int64_t private_bytes() { return planner().private_bytes(); }

  std::tuple<c10::intrusive_ptr<ScriptEpochPlan>, int64_t> resume(PositionDict position) {
    auto resumed = planner().resume(position_of(position));
    return {c10::make_intrusive<ScriptEpochPlan>(std::move(resumed.plan)), resumed.batches};
  }

  // A sampler's saved state (the core's format) at `position` (EpochPlan.position's dict, or an
  // empty dict before the first epoch), starting `next_epoch` after it.
  c10::Dict<std::string, c10::IValue> sampler_state(PositionDict position, int64_t next_epoch) {
    std::optional<EpochPosition> at;
    if (!position.empty()) at = position_of(position);
    auto state = c10::impl::toTypedDict<std::string, c10::IValue>(
        c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get()));
    for (auto& [name, value] : planner().sampler_state(at, next_epoch)) {
      state.insert(name, std::move(value));
    }
    return state;
  }

  // A saved state checked and resumed: (the plan, or None for a state saved before the first
  // epoch; the batches of it served; the epoch after it).
  std::tuple<std::optional<c10::intrusive_ptr<ScriptEpochPlan>>, int64_t, int64_t> resume_state(
      c10::Dict<std::string, c10::IValue> state) {
    return resume_shared_state(std::move(state), "", 0, 0.0);
  }

  // resume_state with the epoch shared on the node (Planner::resume_shared_state): its plan
  // is served as map_shared_plan's is. Without a directory, the rank's own resumed plan.
  std::tuple<std::optional<c10::intrusive_ptr<ScriptEpochPlan>>, int64_t, int64_t>
  resume_shared_state(c10::Dict<std::string, c10::IValue> state, std::string dir,
                      int64_t local_rank, double timeout_s) {
    SamplerState fields;
    for (const auto& entry : state) fields.emplace_back(entry.key(), entry.value());
    auto read = planner().resume_shared_state(fields, "state['", "']", dir, local_rank, timeout_s);
    if (!read.resumed) return {std::nullopt, 0, read.next_epoch};
    auto plan = std::move(read.resumed->plan);
    return {dir.empty() ? c10::make_intrusive<ScriptEpochPlan>(std::move(plan))
                        : serve_shared(std::move(plan)),
            read.resumed->batches, read.next_epoch};
  }

  at::Tensor agreement(int64_t epoch, int64_t rank) {
    return agreement_values(cached(epoch), planner(), rank);
  }

  void check_agreement(int64_t epoch, const at::Tensor& gathered) {
    bload::check_agreement(gathered, cached(epoch), planner());
  }

  PlannerState state() const {
    // The lengths back from the core's copy (none is kept here), 4 bytes a sequence where they
    // fit int32 (all below 2^31 steps), else 8.
    const auto planner = this->planner();  // keeps the lengths below alive
    const auto lengths = planner.lengths();
    const bool fit_int32 = std::all_of(lengths.begin(), lengths.end(), [](uint32_t length) {
      return length <= static_cast<uint32_t>(std::numeric_limits<int32_t>::max());
    });
    auto tensor =
        at::empty({static_cast<int64_t>(lengths.size())}, fit_int32 ? at::kInt : at::kLong);
    if (fit_int32) {
      std::copy(lengths.begin(), lengths.end(), tensor.mutable_data_ptr<int32_t>());
    } else {
      std::copy(lengths.begin(), lengths.end(), tensor.mutable_data_ptr<int64_t>());
    }
    // A mixture's sources follow the options on a line of their own (JSON holds no newline).
    const auto sources = planner.sources_json();
    auto options = plan_options_to_json(planner.options());
    if (!sources.empty()) options += "\n" + sources;
    return {tensor, options};
  }

  static c10::intrusive_ptr<ScriptPlanner> from_state(PlannerState state) {
    auto& [lengths, text] = state;
    const auto newline = text.find('\n');
    const auto options = options_from_json(text.substr(0, newline));
    if (newline == std::string::npos) return c10::make_intrusive<ScriptPlanner>(lengths, options);
    ops::check_lengths(lengths, "lengths");
    const auto host = lengths.to(at::kCPU, at::kLong).contiguous();
    return c10::make_intrusive<ScriptPlanner>(Planner::from_sources_json(
        c10::ArrayRef<int64_t>(host.const_data_ptr<int64_t>(), host.numel()),
        text.substr(newline + 1), options));
  }

 private:
  // The planner, read under the lock: serve_shared replaces it while other threads may call
  // any method. A copy shares the (immutable) core planner.
  Planner planner() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return planner_;
  }

  // A shared plan the rank serves: cached (as the plan its agreement hashes), its lengths the
  // planner's from now on.
  c10::intrusive_ptr<ScriptEpochPlan> serve_shared(EpochPlan plan) {
    std::lock_guard<std::mutex> lock(mutex_);
    planner_ = planner_.with_lengths_of(plan);
    last_ = plan;
    return c10::make_intrusive<ScriptEpochPlan>(std::move(plan));
  }

  // The last epoch planned is kept: a sampler asks for every batch of an epoch in turn. It is
  // planned outside the lock, so that the class's other methods do not wait for a whole epoch.
  EpochPlan cached(int64_t epoch) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (last_ && last_->epoch() == epoch) return *last_;
    }
    auto plan = planner().plan(epoch);
    std::lock_guard<std::mutex> lock(mutex_);
    // Another thread may have planned the same epoch meanwhile, or served a shared plan of it
    // (the plan agreement() must hash): that one stays.
    if (!last_ || last_->epoch() != epoch) last_ = std::move(plan);
    return *last_;
  }

  Planner planner_;
  mutable std::mutex mutex_;  // guards planner_ and last_
  std::optional<EpochPlan> last_;
};

// torch.ops.bload.shared_planner: a Planner of the lengths in the shared plan file of `epoch` in
// `dir` (Planner::from_shared_plan), for a rank that does not hold the lengths.
c10::intrusive_ptr<ScriptPlanner> shared_planner(std::string dir, int64_t epoch, double timeout_s,
                                                 int64_t t_max, int64_t blocks_per_batch,
                                                 int64_t world_size, int64_t seed,
                                                 std::string policy, bool split_oversized,
                                                 std::string cost, int64_t max_pieces) {
  return c10::make_intrusive<ScriptPlanner>(
      Planner::from_shared_plan(options_of(t_max, blocks_per_batch, world_size, seed, policy,
                                           split_oversized, cost, max_pieces),
                                epoch, dir, timeout_s));
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(bload, m) {
  m.class_<ScriptEpochPlan>("EpochPlan")
      .def("epoch", &ScriptEpochPlan::epoch)
      .def("batches_per_rank", &ScriptEpochPlan::batches_per_rank,
           "Batches every rank runs in this plan")
      .def("carries_state", &ScriptEpochPlan::carries_state,
           "Whether each row carries its recurrent state from batch to batch (lanes)")
      .def("batch", &ScriptEpochPlan::batch,
           "The block table of batch `index` of `rank`: int64 [pieces, 6]")
      .def("global_batch", &ScriptEpochPlan::global_batch,
           "Every rank's batch `index` together: (valid steps, pieces, loss_scale, "
           "shifted_loss_scale), the scales world_size / valid and world_size / (valid - pieces)")
      .def("stats", &ScriptEpochPlan::stats, "What the plan costs, as counts")
      .def("rank_cost_imbalance", &ScriptEpochPlan::rank_cost_imbalance,
           "(mean, worst) over the global batches of the costliest rank's cost over the mean "
           "rank's, in the plan's cost")
      .def("plan_hash", &ScriptEpochPlan::plan_hash,
           "Fingerprint of the plan: equal on ranks that planned the same")
      .def("position", &ScriptEpochPlan::position,
           "Where the ranks stand once each has served `batches` batches of this plan: a dict "
           "of epoch, planned_world_size, first_block, world_size, blocks_per_batch, batches, for "
           "Planner.resume")
      .def("private_bytes", &ScriptEpochPlan::private_bytes,
           "Bytes the plan holds of its own: none for a plan mapped from a shared plan file")
      .def("shared", &ScriptEpochPlan::shared,
           "Whether the plan is mapped from a shared plan file");
  m.class_<ScriptPlanner>("Planner")
      .def(torch::init<at::Tensor, int64_t, int64_t, int64_t, int64_t, std::string, bool,
                       std::string, int64_t>(),
           "Plans epochs of packed blocks for `lengths` (a 1-d integer tensor)",
           {torch::arg("lengths"), torch::arg("t_max"), torch::arg("blocks_per_batch") = 1,
            torch::arg("world_size") = 1, torch::arg("seed") = 0, torch::arg("policy") = "best_fit",
            torch::arg("split_oversized") = false, torch::arg("cost") = "steps",
            torch::arg("max_pieces") = -1})
      .def_static("of_sources", &ScriptPlanner::of_sources)
      .def("mixture", &ScriptPlanner::mixture,
           "The mixture's sources (name, weight, sequences), or \"none\" for one lengths set")
      .def("source_starts", &ScriptPlanner::source_starts,
           "Where each source starts among the sequences, and one more at the end")
      .def("source_names", &ScriptPlanner::source_names, "The sources' names, in order")
      .def("source_stats", &ScriptPlanner::source_stats,
           "Each source's part of `epoch`: (name, weight_share, source_sequences, sequences, "
           "steps, share, repeats, left_out)")
      .def("batches_per_rank", &ScriptPlanner::batches_per_rank,
           "Batches every rank runs in `epoch`")
      .def("num_sequences", &ScriptPlanner::num_sequences, "Sequences in the lengths planned")
      .def("batch", &ScriptPlanner::batch,
           "The block table of batch `index` of `rank` in `epoch`: int64 [pieces, 6] with "
           "columns block, block_offset, length, sequence, offset, sequence_length")
      .def("stats", &ScriptPlanner::stats, "What the plan of `epoch` costs, as counts")
      .def("plan_hash", &ScriptPlanner::plan_hash,
           "Fingerprint of the plan of `epoch`: equal on ranks that planned the same")
      .def("sampler_state", &ScriptPlanner::sampler_state,
           "The state a sampler saves at `position` (EpochPlan.position's dict, or {} before the "
           "first epoch), starting `next_epoch` after it: bload's one checkpoint format, a dict "
           "of ints, bools and strings with the lengths' identity, every option and a checksum")
      .def("resume_state", &ScriptPlanner::resume_state,
           "A saved state checked (version, checksum, the lengths and options it was saved for) "
           "and its epoch resumed: (the plan or None, the batches of it served, the next epoch)")
      .def("agreement", &ScriptPlanner::agreement,
           "What every rank must hold alike to train `epoch` (lengths, options, epoch, plan "
           "hash), and last the rank this process serves (rank=-1: not said): an int64 tensor, "
           "for an all-gather before the epoch's first batch",
           {torch::arg("epoch"), torch::arg("rank") = -1})
      .def("check_agreement", &ScriptPlanner::check_agreement,
           "Raises, naming each field and every rank's value, when the rows of `gathered` "
           "(every rank's agreement(epoch), int64 [ranks, fields]) differ")
      .def("plan", &ScriptPlanner::plan, "The plan of `epoch`, as a bload.EpochPlan")
      .def("resume_shared_state", &ScriptPlanner::resume_shared_state,
           "resume_state with the epoch shared on the node: (dict, dir, local_rank, timeout_s); "
           "with an empty dir, resume_state")
      .def("write_shared_plan", &ScriptPlanner::write_shared_plan,
           "Plans `epoch` into a shared plan file in `dir` for the node's ranks "
           "(docs/shared_plans.md); its path")
      .def("map_shared_plan", &ScriptPlanner::map_shared_plan,
           "The plan of `epoch` mapped from the shared plan file in `dir`, waiting up to "
           "`timeout_s` seconds for it; one of other lengths, options or epoch is refused")
      .def("private_bytes", &ScriptPlanner::private_bytes,
           "Bytes the planner holds of its own (its lengths and per-length tables)")
      .def("resume", &ScriptPlanner::resume,
           "The rest of an epoch from `position` (EpochPlan.position's dict, saved with any "
           "world size) for this planner's ranks: (the plan, the batches of it served). With "
           "the saved world size, the same plan; with another, the blocks not yet served, "
           "dealt to these ranks and padded with empty blocks, none of it served")
      .def_pickle([](const c10::intrusive_ptr<ScriptPlanner>& self) { return self->state(); },
                  [](PlannerState state) { return ScriptPlanner::from_state(std::move(state)); });
  m.def("shared_planner", shared_planner);
}

}  // namespace bload::script
