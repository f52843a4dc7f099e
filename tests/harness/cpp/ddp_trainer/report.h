// The report: rank 0's progress line, the per-epoch figures of each rank (packed into a flat
// tensor to be gathered across the ranks, field by field), and rank 0's summary of every rank's
// figures, per epoch and as --json.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "config.h"

namespace trainer {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start);

// Rank 0's progress line: redrawn in place on a terminal, a line per tenth of the epoch otherwise.
class Progress {
 public:
  Progress(bool shown, int64_t total);

  void update(int64_t batch, double loss, double batches_per_second, double frames_per_second);

 private:
  bool shown_;
  int64_t total_;
  bool tty_;
  Clock::time_point drawn_ = Clock::now();
};

// One rank's figures of one epoch.
struct EpochFigures {
  int64_t epoch = 0;
  int64_t first_batch = 0;  // where this run started in the epoch: 0, or a checkpoint's position
  double seconds = 0;       // the epoch
  double first_wait = 0;    // the wait for its first batch (which also starts the loader's workers)
  double wait_share = 0;    // the share of the rest of the epoch spent waiting for the loader
  int64_t batches = 0;
  int64_t frames = 0;   // the steps of sequences
  int64_t padding = 0;  // the steps of padding
  // The steps a recurrent model runs one after another: the sum of the batches' t_max (of
  // the ranks' longest, for --loop padded, whose ranks' batches differ).
  int64_t sequential_steps = 0;
  double first_loss = 0, last_loss = 0;  // mean loss of the epoch's first and last tenth
};

// Mean of the first and last tenth of `losses`.
std::pair<double, double> ends_of(const std::vector<double>& losses);

// Every epoch's figures of this rank, as one flat float64 tensor (the same size on every rank).
at::Tensor pack(const std::vector<EpochFigures>& epochs);

// The rows [world_size, n] that Group::gather makes of every rank's pack(): [rank][epoch].
std::vector<std::vector<EpochFigures>> unpack(const at::Tensor& gathered);

// Rank 0's report of every rank's figures (from unpack): a line per epoch, then with --json one
// JSON line of the run. False when the ranks ran different numbers of batches.
bool report(const Config& config, const std::string& backend, const std::string& device,
            const std::vector<std::vector<EpochFigures>>& ranks);

}  // namespace trainer
