#pragma once
// Everything bload offers C++ trainers: planning, the sampler, the dataset adaptor, the ops and
// the ranks' agreement check.
#include "bload/agreement.h"
#include "bload/dataset.h"
#include "bload/item_pool.h"
#include "bload/lanes.h"
#include "bload/ops.h"
#include "bload/planner.h"
#include "bload/sampler.h"
#include "bload/sequence_store.h"
#include "bload/version.h"
