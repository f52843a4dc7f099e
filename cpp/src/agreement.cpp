// Agreement between DDP ranks: the fingerprint of an epoch's plan, the check of every rank's
// fingerprint, and the one all-gather that collects them.
#include "bload/agreement.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <cstdio>
#include <sstream>
#include <utility>

#include "ops/checks.h"
#include "rust_bridge.h"

namespace bload {
namespace {

// The values of `name` as messages show them: hashes in hex, the policy by name, flags as
// booleans. Another rank's value may be anything, so a policy index this library does not know
// is shown as a number.
std::string shown(const std::string& name, int64_t value) {
  if (name.size() > 5 && name.compare(name.size() - 5, 5, "_hash") == 0) {
    char hex[19];
    std::snprintf(hex, sizeof hex, "0x%016llx", static_cast<unsigned long long>(value));
    return hex;
  }
  if (name == "policy") {
    try {
      return std::string(ffi::policy_of_code(value));
    } catch (const std::exception&) {
      return "policy code " + std::to_string(value);
    }
  }
  if (name == "split_oversized" && (value == 0 || value == 1)) return value ? "true" : "false";
  if (name == "cost") {
    try {
      return std::string(ffi::cost_of_code(value));
    } catch (const std::exception&) {
      return "cost code " + std::to_string(value);
    }
  }
  return std::to_string(value);
}

// "rank 1 has 7" or "ranks 0, 2 have 5", for every distinct value in column `field`, in order of
// first appearance.
std::string values_by_rank(const at::Tensor& gathered, int64_t field, const std::string& name) {
  const auto cells = gathered.accessor<int64_t, 2>();
  std::vector<std::pair<int64_t, std::vector<int64_t>>> groups;
  for (int64_t rank = 0; rank < gathered.size(0); ++rank) {
    const int64_t value = cells[rank][field];
    auto group = groups.begin();
    while (group != groups.end() && group->first != value) ++group;
    if (group == groups.end()) group = groups.insert(groups.end(), {value, {}});
    group->second.push_back(rank);
  }
  std::ostringstream out;
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& [value, ranks] = groups[g];
    out << (g ? ", " : "") << (ranks.size() == 1 ? "rank " : "ranks ");
    for (size_t r = 0; r < ranks.size(); ++r) out << (r ? ", " : "") << ranks[r];
    out << (ranks.size() == 1 ? " has " : " have ") << shown(name, value);
  }
  return out.str();
}

// Every rank served by one process at most: two processes serving one rank would train its
// share twice and leave another's untrained, with every other field alike. `served[row]` is the
// rank the process of that row serves, or -1 where it was not said.
void check_ranks_served(const at::Tensor& served, int64_t world_size) {
  const auto ranks = served.accessor<int64_t, 1>();
  std::vector<std::vector<int64_t>> rows_of(static_cast<size_t>(world_size));
  for (int64_t row = 0; row < served.size(0); ++row) {
    const int64_t rank = ranks[row];
    if (rank == -1) continue;
    TORCH_CHECK(rank >= 0 && rank < world_size, "gathered: row ", row, " serves rank ", rank,
                ": expected a rank from 0 to ", world_size - 1, ", or -1 when it is not said");
    rows_of[static_cast<size_t>(rank)].push_back(row);
  }
  std::ostringstream shared;
  for (int64_t rank = 0; rank < world_size; ++rank) {
    const auto& rows = rows_of[static_cast<size_t>(rank)];
    if (rows.size() < 2) continue;
    shared << (shared.tellp() > 0 ? "; " : "") << "processes ";
    for (size_t i = 0; i < rows.size(); ++i) shared << (i ? ", " : "") << rows[i];
    shared << " all serve rank " << rank;
  }
  const auto message = shared.str();
  TORCH_CHECK(message.empty(), "bload::check_agreement: ranks disagree on rank: ", message,
              " (each process must serve its own rank, 0 to world_size - 1, or some ranks' "
              "sequences are trained twice and others' never; pass rank=torch.distributed."
              "get_rank(), the default, not the node's LOCAL_RANK)");
}

}  // namespace

std::vector<AgreementField> agreement_fields(const EpochPlan& plan, const Planner& planner,
                                             int64_t rank) {
  std::vector<AgreementField> fields{
      {"sequences", planner.num_sequences()},
      {"lengths_hash", static_cast<int64_t>(planner.lengths_hash())},
      // The sources' names, weights and sizes of a mixture (0 for one lengths set).
      {"mixture_hash", static_cast<int64_t>(planner.mixture_hash())},
  };
  // Every option a plan depends on, from the one list of them (a new option joins by itself).
  for (const auto& [name, value] : plan_options_by_name(planner.options())) {
    if (value.isInt()) {
      fields.push_back({name, value.toInt()});
    } else if (value.isBool()) {
      fields.push_back({name, value.toBool() ? 1 : 0});
    } else if (name == "cost") {
      // The core's int64 of the cost (-1 for steps, A for attention:A), shown back by name.
      fields.push_back({name, planner.options().plan.cost});
    } else {
      TORCH_CHECK(name == "policy", "bload::agreement_fields: option ", name, " holds a ",
                  value.tagKind(),
                  ": expected an int or bool (only the policy and cost are named)");
      fields.push_back({name, planner.options().plan.policy});
    }
  }
  fields.push_back({"epoch", plan.epoch()});
  fields.push_back({"plan_hash", static_cast<int64_t>(plan.hash())});
  fields.push_back({kRankField, rank});
  return fields;
}

at::Tensor agreement_values(const EpochPlan& plan, const Planner& planner, int64_t rank) {
  TORCH_CHECK(rank >= -1 && rank < planner.options().plan.world_size, "rank = ", rank,
              ": expected the rank this process serves, from 0 to world_size - 1 = ",
              planner.options().plan.world_size - 1, ", or -1 when it is not said");
  const auto fields = agreement_fields(plan, planner, rank);
  auto values = at::empty({static_cast<int64_t>(fields.size())}, at::kLong);
  for (size_t i = 0; i < fields.size(); ++i) values[static_cast<int64_t>(i)] = fields[i].value;
  return values;
}

void check_agreement(const at::Tensor& gathered, const EpochPlan& plan, const Planner& planner) {
  const auto fields = agreement_fields(plan, planner);
  const auto count = static_cast<int64_t>(fields.size());
  TORCH_CHECK(gathered.dim() == 2 && gathered.scalar_type() == at::kLong && gathered.size(0) >= 1 &&
                  gathered.size(1) == count,
              "gathered: expected an int64 tensor [ranks, ", count,
              "] of every rank's agreement_values, got a ", gathered.scalar_type(), " tensor ",
              gathered.sizes());
  ops::check_has_values(gathered, "gathered");
  const int64_t world_size = planner.options().plan.world_size;
  TORCH_CHECK(gathered.size(0) == world_size, "gathered: ", gathered.size(0),
              " rows: expected one row per rank, world_size = ", world_size);
  const auto rows = gathered.cpu().contiguous();
  const auto first = rows.select(0, 0);
  std::ostringstream disagreements;
  bool inputs_differ = false;
  for (int64_t field = 0; field < count; ++field) {
    const auto& name = fields[static_cast<size_t>(field)].name;
    if (name == kRankField) continue;  // one a row: checked below
    if (rows.select(1, field).eq(first[field]).all().item<bool>()) continue;
    // A plan's hash follows from the fields before it: named only when they all agree.
    if (name == "plan_hash" && inputs_differ) continue;
    disagreements << (inputs_differ ? "; " : "") << "ranks disagree on " << name;
    if (name == "plan_hash") disagreements << " although they agree on its inputs";
    disagreements << ": " << values_by_rank(rows, field, name);
    inputs_differ = true;
  }
  const auto message = disagreements.str();
  TORCH_CHECK(message.empty(), "bload::check_agreement: ", message,
              " (every rank must plan the same epoch: give them the same lengths and options)");
  // The rows agree; a gather that left out this rank's own row (rows of another planner or
  // epoch) must not pass for agreement.
  for (int64_t field = 0; field < count; ++field) {
    const auto& [name, own] = fields[static_cast<size_t>(field)];
    if (name == kRankField) continue;
    const int64_t theirs = first[field].item<int64_t>();
    TORCH_CHECK(theirs == own, "gathered: every row has ", name, " = ", shown(name, theirs),
                ": expected ", shown(name, own),
                " as this rank plans it (gather every rank's "
                "agreement_values, this rank's included)");
  }
  check_ranks_served(rows.select(1, count - 1), world_size);
}

// Whether `group` has a backend for CPU tensors (gloo). torch before 2.12 has no
// ProcessGroup::hasBackendForDeviceType; getBackend, in every version, throws where there is none.
static bool has_cpu_backend(c10d::ProcessGroup& group) {
  try {
    return group.getBackend(c10::kCPU) != nullptr;
  } catch (const c10::Error&) {
    return false;
  }
}

void check_agreement(c10d::ProcessGroup& group, const EpochPlan& plan, const Planner& planner,
                     int64_t rank) {
  // On the CPU where the group can (no copy to the GPU and back), else on CUDA (NCCL alone).
  const c10::Device device =
      has_cpu_backend(group) ? c10::Device(c10::kCPU) : c10::Device(c10::kCUDA);
  const auto mine = agreement_values(plan, planner, rank).to(device);
  std::vector<std::vector<at::Tensor>> all(1);
  for (int rank = 0; rank < group.getSize(); ++rank) all[0].push_back(at::empty_like(mine));
  std::vector<at::Tensor> inputs{mine};
  group.allgather(all, inputs)->wait();
  check_agreement(at::stack(all[0]).cpu(), plan, planner);
}

}  // namespace bload
