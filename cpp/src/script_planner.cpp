// torch.classes.bload.Planner: the planner for Python and TorchScript, as tensors.
//
//   planner = torch.classes.bload.Planner(lengths, t_max=94, world_size=2)
//   for b in range(planner.batches_per_rank(epoch)):
//       table = planner.batch(epoch, rank, b)   # int64 [pieces, 6], see TableColumn

#include <ATen/ATen.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <tuple>

#include "bload/agreement.h"
#include "bload/planner.h"

namespace bload {
namespace {

// `lengths` as a contiguous int64 host tensor: the tensor itself when it is one (no copy: the
// core reads it once and keeps 32 bits a sequence).
at::Tensor lengths_on_host(const at::Tensor& lengths) {
  TORCH_CHECK(lengths.dim() == 1 && !at::isFloatingType(lengths.scalar_type()) &&
                  !at::isComplexType(lengths.scalar_type()) &&
                  lengths.scalar_type() != at::kBool,
              "lengths: expected a 1-d integer tensor of sequence lengths, got a ", lengths.dim(),
              "-d ", lengths.scalar_type(), " tensor");
  return lengths.to(at::kCPU, at::kLong).contiguous();
}

c10::ArrayRef<int64_t> values(const at::Tensor& host) {
  return c10::ArrayRef<int64_t>(host.const_data_ptr<int64_t>(), host.numel());
}

// The pickled state: the lengths, and the plan options as the core's JSON.
using PlannerState = std::tuple<at::Tensor, std::string>;

class ScriptPlanner : public torch::CustomClassHolder {
 public:
  ScriptPlanner(at::Tensor lengths, int64_t t_max, int64_t blocks_per_batch, int64_t world_size,
                int64_t seed, std::string policy, bool split_oversized)
      : ScriptPlanner(lengths, Options(t_max)
                                   .blocks_per_batch(blocks_per_batch)
                                   .world_size(world_size)
                                   .seed(seed)
                                   .policy(policy)
                                   .split_oversized(split_oversized)) {}

  ScriptPlanner(const at::Tensor& lengths, const Options& options)
      : planner_(values(lengths_on_host(lengths)), options) {}

  int64_t batches_per_rank(int64_t epoch) { return plan(epoch).batches_per_rank(); }

  at::Tensor batch(int64_t epoch, int64_t rank, int64_t index) {
    return plan(epoch).batch(rank, index).table;
  }

  c10::Dict<std::string, int64_t> stats(int64_t epoch) {
    c10::Dict<std::string, int64_t> dict;
    for (const auto& [name, value] : plan(epoch).counts()) dict.insert(name, value);
    return dict;
  }

  int64_t plan_hash(int64_t epoch) { return static_cast<int64_t>(plan(epoch).hash()); }

  at::Tensor agreement(int64_t epoch) { return agreement_values(plan(epoch), planner_); }

  void check_agreement(int64_t epoch, const at::Tensor& gathered) {
    bload::check_agreement(gathered, plan(epoch), planner_);
  }

  PlannerState state() const {
    // The lengths back from the core's copy (none is kept here: 8 bytes a sequence saved).
    const auto lengths = planner_.lengths();
    auto tensor = at::empty({static_cast<int64_t>(lengths.size())}, at::kLong);
    std::copy(lengths.begin(), lengths.end(), tensor.mutable_data_ptr<int64_t>());
    return {tensor, plan_options_to_json(planner_.options())};
  }

  static c10::intrusive_ptr<ScriptPlanner> from_state(PlannerState state) {
    auto& [lengths, options] = state;
    return c10::make_intrusive<ScriptPlanner>(lengths, options_from_json(options));
  }

 private:
  // The last epoch planned is kept: a sampler asks for every batch of an epoch in turn.
  EpochPlan plan(int64_t epoch) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!last_ || last_->epoch() != epoch) {
      last_ = planner_.plan(epoch);
    }
    return *last_;
  }

  Planner planner_;
  std::mutex mutex_;
  std::optional<EpochPlan> last_;
};

}  // namespace

TORCH_LIBRARY_FRAGMENT(bload, m) {
  m.class_<ScriptPlanner>("Planner")
      .def(torch::init<at::Tensor, int64_t, int64_t, int64_t, int64_t, std::string, bool>(),
           "Plans epochs of packed blocks for `lengths` (a 1-d integer tensor)",
           {torch::arg("lengths"), torch::arg("t_max"), torch::arg("blocks_per_batch") = 1,
            torch::arg("world_size") = 1, torch::arg("seed") = 0,
            torch::arg("policy") = "best_fit", torch::arg("split_oversized") = false})
      .def("batches_per_rank", &ScriptPlanner::batches_per_rank,
           "Batches every rank runs in `epoch`")
      .def("batch", &ScriptPlanner::batch,
           "The block table of batch `index` of `rank` in `epoch`: int64 [pieces, 6] with "
           "columns block, block_offset, length, sequence, offset, sequence_length")
      .def("stats", &ScriptPlanner::stats, "What the plan of `epoch` costs, as counts")
      .def("plan_hash", &ScriptPlanner::plan_hash,
           "Fingerprint of the plan of `epoch`: equal on ranks that planned the same")
      .def("agreement", &ScriptPlanner::agreement,
           "What every rank must hold alike to train `epoch` (lengths, options, epoch, plan "
           "hash): an int64 tensor, for an all-gather before the epoch's first batch")
      .def("check_agreement", &ScriptPlanner::check_agreement,
           "Raises, naming each field and every rank's value, when the rows of `gathered` "
           "(every rank's agreement(epoch), int64 [ranks, fields]) differ")
      .def_pickle(
          [](const c10::intrusive_ptr<ScriptPlanner>& self) { return self->state(); },
          [](PlannerState state) { return ScriptPlanner::from_state(std::move(state)); });
}

}  // namespace bload
