#pragma once
// Everything bload offers C++ trainers: planning, the sampler, the dataset adaptor and the ops.
#include "bload/dataset.h"
#include "bload/ops.h"
#include "bload/planner.h"
#include "bload/sampler.h"
