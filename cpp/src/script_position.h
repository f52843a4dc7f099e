// An EpochPosition as Python and TorchScript hold it (torch.classes.bload.EpochPlan's position(),
// Planner's resume()): a dict of its fields by name.
#pragma once

#include <ATen/core/Dict.h>

#include <cstdint>
#include <string>

#include "bload/planner.h"

namespace bload::script {

using PositionDict = c10::Dict<std::string, int64_t>;

PositionDict dict_of(const EpochPosition& position);
// The position a dict holds; one that lacks a field or has another is refused, naming it.
EpochPosition position_of(const PositionDict& dict);

}  // namespace bload::script
