// torch.classes.bload.EpochPlan, one epoch's plan as torch.classes.bload.Planner's plan(epoch)
// returns it, or as its resume(position) does to go on with an epoch part-way, on the same world
// size or another; a position is a dict of the core's EpochPosition fields. Registered with the
// Planner (script_planner.cpp), whose methods return it.
#pragma once

#include <ATen/ATen.h>
#include <torch/custom_class.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>

#include "bload/planner.h"

namespace bload::script {

// An EpochPosition as Python and TorchScript hold it: a dict of its fields by name.
using PositionDict = c10::Dict<std::string, int64_t>;

PositionDict dict_of(const EpochPosition& position);
// The position a dict holds; one that lacks a field or has another is refused, naming it.
EpochPosition position_of(const PositionDict& dict);

// One epoch's plan (shared and immutable, like bload::EpochPlan).
class ScriptEpochPlan : public torch::CustomClassHolder {
 public:
  explicit ScriptEpochPlan(EpochPlan plan) : plan_(std::move(plan)) {}

  int64_t epoch() { return plan_.epoch(); }
  int64_t batches_per_rank() { return plan_.batches_per_rank(); }
  bool carries_state() { return plan_.carries_state(); }
  at::Tensor batch(int64_t rank, int64_t index) { return plan_.batch(rank, index).table; }
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

}  // namespace bload::script
