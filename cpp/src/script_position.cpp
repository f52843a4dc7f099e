// The position dict (script_position.h): an EpochPosition's fields by name, in both directions
// from one list.
#include "script_position.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace bload::script {
namespace {

std::vector<std::pair<const char*, int64_t EpochPosition::*>> position_fields() {
  return {{"epoch", &EpochPosition::epoch},
          {"planned_world_size", &EpochPosition::planned_world_size},
          {"first_block", &EpochPosition::first_block},
          {"world_size", &EpochPosition::world_size},
          {"blocks_per_batch", &EpochPosition::blocks_per_batch},
          {"batches", &EpochPosition::batches}};
}

}  // namespace

PositionDict dict_of(const EpochPosition& position) {
  PositionDict dict;
  for (const auto& [name, field] : position_fields()) dict.insert(name, position.*field);
  return dict;
}

EpochPosition position_of(const PositionDict& dict) {
  const auto fields = position_fields();
  const char* expected =
      "a dict of epoch, planned_world_size, first_block, world_size, blocks_per_batch and "
      "batches, as EpochPlan.position() returns";
  EpochPosition position{};
  for (const auto& [name, field] : fields) {
    auto found = dict.find(name);
    TORCH_CHECK(found != dict.end(), "position has no '", name, "': expected ", expected);
    position.*field = found->value();
  }
  for (const auto& entry : dict) {
    const bool known = std::any_of(fields.begin(), fields.end(),
                                   [&](const auto& f) { return entry.key() == f.first; });
    TORCH_CHECK(known, "position['", entry.key(), "']: expected ", expected);
  }
  return position;
}

}  // namespace bload::script
