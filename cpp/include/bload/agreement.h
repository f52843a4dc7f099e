#pragma once
// Agreement between DDP ranks, checked before an epoch's first batch. Ranks never exchange plans:
// each computes its own, a pure function of (lengths, options, epoch). A rank started with
// another seed, t_max or lengths file therefore plans another epoch, and without a check it
// trains on it silently (sequences trained twice, others never) or waits in a collective the
// others never join. One small all-gather of a fingerprint turns that into an error on every
// rank:
//
//   bload::check_agreement(*process_group, sampler.plan(), sampler.planner(), sampler.rank());
//
// The fingerprint is the lengths (count and hash), every plan option, the epoch and the plan's
// hash, as int64 values, with the rank each process serves (two serving one rank is an error).
// Python gets the same through torch.classes.bload.Planner's agreement(epoch, rank) and
// check_agreement(epoch, gathered).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bload/export.h"
#include "bload/planner.h"

namespace c10d {
class ProcessGroup;
}  // namespace c10d

namespace bload {

// One value every rank must hold alike: "sequences", "lengths_hash", each plan option by its
// name (the policy as its index, split_oversized as 0 or 1), "epoch" and "plan_hash"; and last,
// "rank", the one value that must differ: the rank the process serves (-1 where not said).
struct AgreementField {
  std::string name;
  int64_t value = 0;
};

// The name of the last field, the rank served.
inline constexpr const char* kRankField = "rank";

BLOAD_API std::vector<AgreementField> agreement_fields(const EpochPlan& plan,
                                                       const Planner& planner, int64_t rank = -1);

// The fields' values, an int64 tensor [fields] on the CPU: what each rank contributes. `rank`
// is the rank this process serves (a BlockSampler's rank()), 0 to world_size - 1, or -1 where
// it is not said (then nothing checks that two processes serve one rank).
BLOAD_API at::Tensor agreement_values(const EpochPlan& plan, const Planner& planner,
                                      int64_t rank = -1);

// `gathered` is every rank's agreement_values, int64 [ranks, fields] (row r from rank r), got by
// any all-gather. Throws c10::Error when the rows differ, naming each field that differs and
// every rank's value of it, e.g. "ranks disagree on seed: rank 0 has 0, rank 1 has 1", or when
// two rows serve one rank ("processes 0, 1 all serve rank 0"). The message depends on
// `gathered` only, so every rank throws the same one.
BLOAD_API void check_agreement(const at::Tensor& gathered, const EpochPlan& plan,
                               const Planner& planner);

// The all-gather over `group` (one collective; CPU tensors where the group has a CPU backend,
// otherwise on the current CUDA device), then the check above. Every rank of the group must call
// it, at the same point, with the rank it serves:
//
//   bload::check_agreement(*group, sampler.plan(), sampler.planner(), sampler.rank());
BLOAD_API void check_agreement(c10d::ProcessGroup& group, const EpochPlan& plan,
                               const Planner& planner, int64_t rank = -1);

}  // namespace bload
