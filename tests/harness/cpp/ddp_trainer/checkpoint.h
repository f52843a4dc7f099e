// Recovery: rank 0's checkpoints, which a restarted run resumes from, and the per-step log, the
// record of which steps each rank trained, and when.
//
// What "trained" means: a batch is trained once its gradients' all-reduce has completed and the
// optimizer has stepped. A checkpoint written after batch k of an epoch holds batches 0..k-1 of it
// (and every earlier epoch), so a run resumed from it trains batches k.. and nothing before. Each
// rank logs a batch's pieces before entering its all-reduce, which no rank completes before every
// rank has entered it: every batch a checkpoint holds is in every rank's log. A killed run's lines
// from batch k on belong to batches whose training was lost with it (or never completed), and a
// resumed run trains them again: they are to be discarded.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <bload/planner.h>

#include "config.h"

namespace bload {
class BlockSampler;
}  // namespace bload

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace trainer {

// DIR/checkpoint.pt: `parameters`, `optimizer`'s state, the position of `trained` (a sampler
// advanced once per trained batch; the loader's own copy runs ahead of the training) and, with
// the lanes policy, every lane's recurrent state `lane_states` [lanes, hidden]. Written to
// DIR/checkpoint.pt.partial, flushed to the disk, then renamed over the last one: a kill at any
// point leaves a complete checkpoint, the new one or the one before.
void save_checkpoint(const std::string& dir, const std::vector<at::Tensor>& parameters,
                     torch::optim::Optimizer& optimizer, const bload::BlockSampler& trained,
                     const at::Tensor& lane_states);

// Loads DIR/checkpoint.pt into `parameters`, `optimizer`, each of `samplers` and `lane_states`
// (left undefined where the checkpoint has none); false where there is no checkpoint. Each
// sampler's load decides where it resumes, and that the checkpoint was saved with the same
// lengths and options, world size and blocks per batch as it allows (a c10::Error naming what
// differs).
bool load_checkpoint(const std::string& dir, const std::vector<at::Tensor>& parameters,
                     torch::optim::Optimizer& optimizer,
                     const std::vector<bload::BlockSampler*>& samplers, at::Tensor* lane_states);

// --step-log FILE: rank R appends to FILE.R a line "# run: rank R of W from epoch E batch B" per
// run, then "epoch batch sequence offset length" per piece of each batch it trains, flushed
// before the batch's all-reduce. A run that resumed an epoch saved on another world size says so
// in its first line, "... (the plan for P ranks from its batch K)": its own batches count from
// 0, and K is where the saved run stood. Does nothing without --step-log.
class StepLog {
 public:
  explicit StepLog(const Config& config);

  void start(const bload::EpochPosition& at);
  void write(int64_t epoch, int64_t batch, const at::Tensor& table);

 private:
  const Config& config_;
  std::ofstream out_;
};

}  // namespace trainer
