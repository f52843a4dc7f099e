// The training loops: bload's packed loop, the padded loop and the naive per-sequence loop, on the
// RunningSum data set, and the model they train (bload::nn::PackedGRU or a TorchScript one).
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "bload/planner.h"

#include "config.h"
#include "group.h"
#include "report.h"

namespace trainer {

class Model;  // the C++ module or a TorchScript one (training.cpp)

// config.model on `device`: the C++ module with the same initial weights on every rank (from
// config.seed), or the TorchScript file.
std::shared_ptr<Model> load_model(const Config& config, const c10::Device& device);

// The lengths this run trains on: config.lengths, cut to config.sequences.
std::vector<int64_t> read_run_lengths(const Config& config);
// The plan options of config's packed loop (pin_memory on CUDA devices).
bload::Options plan_options(const Config& config, bool pin_memory);

// bload's loop: every rank runs the same number of identically shaped batches. A figure per epoch.
std::vector<EpochFigures> train_packed(const Config& config, const std::vector<int64_t>& lengths,
                                       Model& model, Group& group, const c10::Device& device);

// The loop bload is measured against (padded_sampler.h): shuffled sequences,
// config.blocks_per_batch to a batch, each batch padded to its longest sequence.
std::vector<EpochFigures> train_padded(const Config& config, const std::vector<int64_t>& lengths,
                                       Model& model, Group& group, const c10::Device& device);

// The loop DDP users write first (the C++ module only): each rank steps frame by frame through its
// own sequences, with an all-reduce per frame, and falls out of step with the others.
std::vector<EpochFigures> train_naive(const Config& config, const std::vector<int64_t>& lengths,
                                      Model& model, Group& group, const c10::Device& device);

}  // namespace trainer
