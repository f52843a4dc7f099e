#pragma once
// Planning from C++: options, the planner and its epoch plans, and the block table a batch is
// described by. The planning itself happens in bload's Rust core (through cpp/bridge); errors
// from it arrive as c10::Error, a RuntimeError in Python.

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bload/export.h"

namespace bload {

// Everything a plan and a packed batch depend on, set in libtorch's builder style:
//   bload::Options(94).world_size(world).rank(rank).target_padding(-100)
struct Options {
  Options() = default;
  explicit Options(int64_t t_max) : t_max_(t_max) {}

  // Steps per block.
  TORCH_ARG(int64_t, t_max) = 0;
  // Blocks in each batch of each rank.
  TORCH_ARG(int64_t, blocks_per_batch) = 1;
  // Data-parallel ranks, and the one this process is (used by BlockSampler).
  TORCH_ARG(int64_t, world_size) = 1;
  TORCH_ARG(int64_t, rank) = 0;
  // Seed of every random choice: a plan is a pure function of (lengths, options, epoch).
  TORCH_ARG(int64_t, seed) = 0;
  // "best_fit" (near-minimal padding), "random_fill" (the BLoad paper's random filling) or
  // "pad_to_max" (one sequence per block: the padding baseline).
  TORCH_ARG(std::string, policy) = "best_fit";
  // Cut sequences longer than t_max into chunks instead of rejecting them.
  TORCH_ARG(bool, split_oversized) = false;
  // Value of padding steps in packed data and targets (for example an ignore index).
  TORCH_ARG(double, data_padding) = 0.0;
  TORCH_ARG(double, target_padding) = 0.0;
  // Allocate packed batches in pinned host memory, for asynchronous host-to-device copies.
  TORCH_ARG(bool, pin_memory) = false;
};

// Columns of a block table: one int64 row per piece, in block order, then in order inside the
// block. A piece is a run of steps of one sequence (the whole sequence unless it was split).
enum TableColumn : int64_t {
  kBlock = 0,        // block of the batch it lies in, from 0
  kBlockOffset = 1,  // first step it takes in that block
  kLength = 2,       // steps
  kSequence = 3,     // index of its sequence in the dataset
  kOffset = 4,       // where it starts in its sequence (not 0 only for split sequences)
  kSequenceLength = 5,  // steps of the whole sequence
  kTableColumns = 6,
};

// One batch of one rank: `blocks` blocks of `t_max` steps and the pieces filling them. This is
// the batch request BlockSampler hands to BlockDataset.
struct BlockTable {
  at::Tensor table;  // int64 [pieces, kTableColumns], on the CPU
  int64_t blocks = 0;
  int64_t t_max = 0;

  // Blocks in the batch: torch's DataLoader compares a request's size() with its batch_size
  // (for drop_last) and requires it to be positive.
  size_t size() const { return static_cast<size_t>(blocks); }
};

// What a plan costs (bload::PlanStats in the Rust core). Every padded, deleted or split step is
// counted.
struct PlanStats {
  int64_t sequences, steps, pieces, blocks, padding, deleted;
  int64_t split_sequences, split_pieces, rounding_blocks, rounding_padding, empty_blocks;
  int64_t lower_bound_blocks, lower_bound_padding;
};

// One epoch's plan, shared and immutable; copies are cheap.
class BLOAD_API EpochPlan {
 public:
  int64_t epoch() const;
  // Batches every rank runs this epoch, the same on every rank.
  int64_t batches_per_rank() const;
  // Batch `index` of `rank`.
  BlockTable batch(int64_t rank, int64_t index) const;
  PlanStats stats() const;
  // Fingerprint of the plan's content: equal on every rank that planned the same epoch.
  uint64_t hash() const;

  struct Impl;

 private:
  friend class Planner;
  explicit EpochPlan(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// Plans epochs for fixed lengths and options. Construction checks everything; copies share
// the (immutable) planner.
class BLOAD_API Planner {
 public:
  Planner(const std::vector<int64_t>& lengths, const Options& options);
  // The plan of `epoch` (at least 0): the same on every rank and machine.
  EpochPlan plan(int64_t epoch) const;
  const Options& options() const;
  int64_t num_sequences() const;
  // Fingerprint of the lengths, to tell a saved state from another dataset's.
  uint64_t lengths_hash() const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

// Lengths from a text file, one per line (the same parser as the `bload` command line).
BLOAD_API std::vector<int64_t> read_lengths(const std::string& path);

}  // namespace bload
