#pragma once
// Planning from C++: options, the planner and its epoch plans, and the block table a batch is
// described by. The planning itself happens in bload's Rust core (through cpp/bridge); errors
// from it arrive as c10::Error, a RuntimeError in Python.

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <torch/arg.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bload/export.h"

// The planner's options (t_max, blocks_per_batch, world_size, seed, policy, split_oversized, cost,
// max_pieces),
// the block table's columns (TableColumn) and a plan's stats (PlanStats) are the Rust core's,
// shared through the cxx bridge: this generated header holds their one C++ definition.
#include "bload-cxx/src/types.rs.h"

namespace bload {

// The read_ahead option's default and its most (the core's READ_AHEAD and MAX_READ_AHEAD).
BLOAD_API int64_t default_read_ahead();
BLOAD_API int64_t max_read_ahead();

// Everything a plan and a packed batch depend on, set in libtorch's builder style:
//   bload::Options(94).world_size(world).rank(rank).target_padding(-100)
// The planner's part is a PlanOptions, with the core's defaults; the loader's part follows.
struct BLOAD_API Options {
  Options() : Options(0) {}
  explicit Options(int64_t t_max);

  // The planner's options, as the core receives them.
  PlanOptions plan;

  // Steps per block.
  Options& t_max(int64_t value) { return set(plan.t_max, value); }
  int64_t t_max() const { return plan.t_max; }
  // Blocks in each batch of each rank.
  Options& blocks_per_batch(int64_t value) { return set(plan.blocks_per_batch, value); }
  int64_t blocks_per_batch() const { return plan.blocks_per_batch; }
  // Data-parallel ranks.
  Options& world_size(int64_t value) { return set(plan.world_size, value); }
  int64_t world_size() const { return plan.world_size; }
  // Seed of every random choice: a plan is a pure function of (lengths, options, epoch).
  Options& seed(int64_t value) { return set(plan.seed, value); }
  int64_t seed() const { return plan.seed; }
  // "best_fit" (near-minimal padding), "random_fill" (the BLoad paper's random filling) or
  // "pad_to_max" (one sequence per block: the padding baseline), or "lanes" (row j of rank r's
  // every batch is lane r * blocks_per_batch + j, which runs its sequences, of any length, end to
  // end, t_max steps a batch: a model carries each row's state across batches, see
  // BatchRequest::carry). A name the core does not know is an error (c10::Error) here;
  // bload::policy_names() (ops.h) lists those it knows.
  Options& policy(const std::string& name);
  std::string policy() const;
  // Cut sequences longer than t_max into chunks instead of rejecting them.
  Options& split_oversized(bool value) { return set(plan.split_oversized, value); }
  bool split_oversized() const { return plan.split_oversized; }
  // How blocks are dealt to ranks: "steps" (the default: in their shuffled order) or
  // "attention:A" (a piece of L steps costs A*L + L^2; blocks of like cost share a global batch
  // and are dealt so that its costliest rank costs least; see docs/cost_balance.md). Checked by
  // the core here (c10::Error naming cost); not with "lanes", whose rows never move.
  Options& cost(const std::string& name);
  std::string cost() const;
  // The most pieces (sequences, or chunks of split ones) a block holds, for attention kernels
  // and CUDA graphs that want a bounded cu_seqlens: at least 1, or -1 (the default) for no cap.
  // Every packing policy keeps to it; "lanes" refuses it. Checked by the core when a
  // planner is made (c10::Error naming max_pieces).
  Options& max_pieces(int64_t value) { return set(plan.max_pieces, value); }
  int64_t max_pieces() const { return plan.max_pieces; }

  // The rank this process is (used by BlockSampler).
  TORCH_ARG(int64_t, rank) = 0;
  // Value of padding steps in packed data and targets (for example an ignore index).
  TORCH_ARG(double, data_padding) = 0.0;
  TORCH_ARG(double, target_padding) = 0.0;
  // Allocate packed batches in pinned host memory, for asynchronous host-to-device copies.
  TORCH_ARG(bool, pin_memory) = false;
  // What a packed batch's position_ids count from: "sequence" (the step's position in its
  // sequence, the default) or "piece" (from 0 at every piece, as attention over documents that
  // never see each other wants). A loader option: the plan is the same. Checked by the core when
  // a batch is packed (an error naming positions).
  TORCH_ARG(std::string, positions) = "sequence";
  // The batches after each one whose reads the loader starts before they are asked for (0:
  // none), through the dataset's prefetch hook (docs/read_ahead.md): BlockSampler hands each
  // request out with their tables. From 0 to max_read_ahead(), checked by BlockSampler.
  TORCH_ARG(int64_t, read_ahead) = default_read_ahead();
  // Plans shared on a node (docs/shared_plans.md): with a directory here, BlockSampler serves
  // each epoch from a plan file in it that the rank of local_rank 0 writes and every local rank
  // maps (one plan a node instead of one a rank), waiting up to shared_plan_timeout seconds for
  // it. Empty (the default): every rank plans its own epoch.
  TORCH_ARG(std::string, shared_plan_dir) = "";
  TORCH_ARG(int64_t, local_rank) = 0;
  TORCH_ARG(double, shared_plan_timeout) = 600.0;

 private:
  template <typename Field, typename Value>
  Options& set(Field& field, Value value) {
    field = value;
    return *this;
  }
};

// The planner's options by name (t_max, ..., split_oversized), as the sampler's archives store
// and compare them.
BLOAD_API std::vector<std::pair<std::string, c10::IValue>> plan_options_by_name(
    const Options& options);
// The planner's options as the core writes them in JSON (pickles store them so), and back,
// checked; loader options (rank, padding, pin_memory, positions) are not part of them.
BLOAD_API std::string plan_options_to_json(const Options& options);
BLOAD_API Options options_from_json(const std::string& text);

// Indices of the block table's columns (TableColumn), for indexing rows of an int64 tensor.
inline constexpr int64_t column(TableColumn c) { return static_cast<int64_t>(c); }
inline constexpr int64_t kBlock = column(TableColumn::Block);
inline constexpr int64_t kBlockOffset = column(TableColumn::BlockOffset);
inline constexpr int64_t kLength = column(TableColumn::Length);
inline constexpr int64_t kSequence = column(TableColumn::Sequence);
inline constexpr int64_t kOffset = column(TableColumn::Offset);
inline constexpr int64_t kSequenceLength = column(TableColumn::SequenceLength);
// SequenceLength is the last column (checked where the bridge is compiled).
inline constexpr int64_t kTableColumns = kSequenceLength + 1;

// One batch of one rank, as BlockSampler hands it to BlockDataset: `blocks` blocks of `t_max`
// steps, and the block table of the pieces filling them.
struct BatchRequest {
  at::Tensor table;  // the block table: int64 [pieces, kTableColumns], on the CPU
  int64_t blocks = 0;
  int64_t t_max = 0;
  // Each row carries its recurrent state from the previous batch (the "lanes" policy); row j is
  // lane first_lane + j (first_lane = rank * blocks).
  bool carry = false;
  int64_t first_lane = 0;
  // Sequences in the lengths planned (0: not known, for a request made by hand): a dataset whose
  // size differs is refused by BlockDataset, naming both, before it is read out of its range.
  int64_t sequences = 0;
  // Read-ahead (docs/read_ahead.md): the batch's index in its epoch, which pass of the sampler
  // over the epoch handed it out (read-ahead starts over with each), the sampler's read_ahead,
  // and the tables of the batches after it (as many, fewer at the epoch's end). BlockDataset
  // gives them to the dataset's prefetch hook.
  int64_t index = 0;
  int64_t pass = 0;
  int64_t read_ahead = 0;
  std::vector<at::Tensor> ahead{};
  // The global batch this one is part of (every rank's batch of the same index): its real steps,
  // pieces and loss scales, from the plan. BlockSampler fills it in (EpochPlan::global_batch);
  // EpochPlan::batch and a request made by hand leave it 0.
  GlobalBatch global{};

  // Blocks in the batch: torch's DataLoader compares a request's size() with its batch_size
  // (for drop_last) and requires it to be positive.
  size_t size() const { return static_cast<size_t>(blocks); }
};

// One epoch's plan, shared and immutable; copies are cheap.
class BLOAD_API EpochPlan {
 public:
  int64_t epoch() const;
  // Batches every rank runs this epoch, the same on every rank.
  int64_t batches_per_rank() const;
  // Whether each row carries its recurrent state from batch to batch (the "lanes" policy).
  bool carries_state() const;
  // Batch `index` of `rank` (its table; `global` is left 0).
  BatchRequest batch(int64_t rank, int64_t index) const;
  // Every rank's batch `index` together: its real steps and its pieces (GlobalBatch, the core's).
  GlobalBatch global_batch(int64_t index) const;
  PlanStats stats() const;
  // Every count of stats() by name, in the core's order (for dicts and reports).
  std::vector<std::pair<std::string, int64_t>> counts() const;
  // Fingerprint of the plan's content: equal on every rank that planned the same epoch.
  uint64_t hash() const;
  // Where the ranks stand once each has served `batches` (0 to batches_per_rank()) batches of
  // this plan: what a sampler saves, for Planner::resume to go on from (EpochPosition is the
  // core's, shared through the bridge like PlanOptions).
  EpochPosition position(int64_t batches) const;
  // Bytes the plan holds of its own: none for the columns of a plan mapped from a shared plan
  // file (Planner::map_shared_plan).
  int64_t private_bytes() const;
  // Whether the plan is mapped from a shared plan file.
  bool shared() const;

  struct Impl;

 private:
  friend class Planner;
  explicit EpochPlan(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// An epoch to go on with: the plan, and the batches of it each rank has already served.
struct Resumed {
  EpochPlan plan;
  int64_t batches = 0;
};

// A sampler's saved state: its fields by name, each an int, a bool or a string (the one checkpoint
// format of C++ archives, BlockSampler::state_dict and Python's BlockSampler.state_dict; the core
// defines it, src/plan/state.rs).
using SamplerState = std::vector<std::pair<std::string, c10::IValue>>;

// A saved state read back: the epoch to go on with (none before the first epoch), and the epoch
// a sampler starts after it.
struct ResumedState {
  std::optional<Resumed> resumed;
  int64_t next_epoch = 0;
};

// One source of a mixture (docs/mixtures.md): its sequences' lengths and its weight, the share of
// each epoch's steps it gives relative to the other sources' weights. A source without a name is
// named by its index.
struct Source {
  std::string name;
  std::vector<int64_t> lengths;
  double weight = 1.0;
};

// What one source of a mixture gives an epoch (the core's bload::SourceStats).
struct SourceStats {
  std::string name;
  double weight_share = 0;       // its weight over the sum of the weights
  int64_t source_sequences = 0;  // sequences in the source
  int64_t sequences = 0;         // sequences the epoch holds from it, repeats counted
  int64_t steps = 0;             // steps the epoch holds from it
  double share = 0;              // steps over the epoch's steps: within a sequence of weight_share
  int64_t repeats = 0;           // extra times sequences come (a source below its share)
  int64_t left_out = 0;          // sequences not served (a source above its share)
};

// Plans epochs for fixed lengths and options. Construction checks everything; copies share
// the (immutable) planner.
class BLOAD_API Planner {
 public:
  // `lengths` are read, not kept: the core holds its own compact copy (32 bits a sequence).
  Planner(c10::ArrayRef<int64_t> lengths, const Options& options);
  Planner(c10::ArrayRef<int32_t> lengths, const Options& options);
  // A mixture of sources (docs/mixtures.md): each epoch holds, from each source, its weight's
  // share of the steps of all sources together (repeating a source below its share, drawing
  // from one above it), packed together. Sequences are numbered as if the sources were
  // concatenated in order (source_of maps one back). Bad sources are errors (c10::Error) naming
  // sources[s] and what was expected.
  Planner(const std::vector<Source>& sources, const Options& options);
  // A mixture stored as its concatenated lengths and sources_json() (as pickles store it).
  static Planner from_sources_json(c10::ArrayRef<int64_t> lengths, const std::string& sources,
                                   const Options& options);
  // The core's JSON of the sources (name, weight, sequences each), "" for one lengths set.
  std::string sources_json() const;
  // The plan of `epoch` (at least 0): the same on every rank and machine.
  EpochPlan plan(int64_t epoch) const;
  // The rest of an epoch from a saved position, for this planner's world size (the other
  // options, blocks_per_batch aside, must be the saved ones). With the saved world size, the
  // same plan and batches served; with another, the blocks not yet served, in their order, dealt
  // to this planner's ranks and padded with empty blocks to whole global batches (counted in the
  // stats), none served. A lanes plan is never re-dealt: it resumes with the lane count it saved
  // (world_size * blocks_per_batch, in any factors), the same lanes from the same batch; other
  // policies need the saved blocks_per_batch. Errors name the field of `at` and its bounds.
  Resumed resume(const EpochPosition& at) const;
  // Plans shared on a node (docs/shared_plans.md). write_shared_plan plans `epoch` into a file
  // in `dir` (written under a temporary name, flushed and renamed) and returns its path;
  // map_shared_plan maps the file another local rank writes there, waiting up to `timeout_s`
  // seconds for it, and refuses one of other lengths, options or epoch, or damaged, naming it.
  std::string write_shared_plan(int64_t epoch, const std::string& dir) const;
  EpochPlan map_shared_plan(int64_t epoch, const std::string& dir, double timeout_s) const;
  // The plan of `epoch` as options() say: plan(epoch) without a shared_plan_dir; with one, the
  // shared plan (written first when local_rank is 0).
  EpochPlan plan_for_node(int64_t epoch) const;
  // A planner of the lengths in the shared plan file of `epoch` under `options` in `dir`
  // (waiting up to `timeout_s` seconds for it): for a rank that does not hold the lengths. Its
  // lengths are the mapped file's, so it holds only its per-length tables of its own.
  static Planner from_shared_plan(const Options& options, int64_t epoch, const std::string& dir,
                                  double timeout_s);
  // This planner with its lengths read from `plan`, mapped from a shared plan file of the same
  // lengths (map_shared_plan, plan_for_node), in place of its own: the planner a rank keeps once
  // it serves shared plans (BlockSampler does), holding only its per-length tables; its own
  // lengths are freed with the last copy that holds them. Later epochs are planned from the
  // mapped lengths. A plan not shared leaves them as they are; one of other lengths is an error.
  Planner with_lengths_of(const EpochPlan& plan) const;
  // Bytes the planner holds of its own (its lengths and per-length tables).
  int64_t private_bytes() const;
  const Options& options() const;
  int64_t num_sequences() const;
  // The lengths planned, as the core holds them (valid while this planner lives).
  c10::ArrayRef<uint32_t> lengths() const;
  // Fingerprint of the lengths, to tell a saved state from another dataset's.
  uint64_t lengths_hash() const;
  // The mixture as states and messages show it (each source's name, weight and sequences), or
  // "none" for one lengths set; its fingerprint (0 for none).
  std::string mixture() const;
  uint64_t mixture_hash() const;
  bool is_mixture() const { return !source_names().empty(); }
  // The sources' names (none for one lengths set), and where each starts among the sequences,
  // with one more at the end.
  std::vector<std::string> source_names() const;
  std::vector<int64_t> source_starts() const;
  // The source of sequence `index` (as a block table's sequence column holds it) and its index
  // in that source.
  std::pair<int64_t, int64_t> source_of(int64_t index) const;
  // What each source gives `epoch` (empty for one lengths set).
  std::vector<SourceStats> source_stats(int64_t epoch) const;
  // The state a sampler of this planner saves at `position` (none before the first epoch),
  // starting `next_epoch` after it: the core's fields in order, the last its checksum.
  SamplerState sampler_state(const std::optional<EpochPosition>& position,
                             int64_t next_epoch) const;
  // A saved state (any order of fields) checked and its epoch resumed: the version, the
  // checksum, then the lengths and options it was saved for (every field that differs is named
  // with both values), then where it stood. Errors name a field as `prefix + name + suffix`.
  ResumedState resume_state(const SamplerState& state, const std::string& prefix,
                            const std::string& suffix) const;
  // resume_state with the epoch shared on the node (docs/shared_plans.md): the rank of
  // `local_rank` 0 resumes it into a file in `shared_plan_dir`, and every local rank maps it
  // (waiting up to `timeout_s` seconds): the same plan and batches as resume_state gives.
  ResumedState resume_shared_state(const SamplerState& state, const std::string& prefix,
                                   const std::string& suffix, const std::string& shared_plan_dir,
                                   int64_t local_rank, double timeout_s) const;

  struct Impl;

 private:
  Planner() = default;
  explicit Planner(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// Lengths from a lengths file (docs/data.md): text (README, "Lengths files"), a 1-D integer .npy
// or a Megatron .idx, chosen by its first bytes, then its extension. The core's readers, shared
// with the `bload` command line and Python.
BLOAD_API std::vector<int64_t> read_lengths(const std::string& path);
// The same read as `format` ("text", "npy" or "idx"; "" detects it).
BLOAD_API std::vector<int64_t> read_lengths(const std::string& path, const std::string& format);
// The format of a lengths file: "text", "npy", "idx", or "arrow" and "parquet", which only
// Python reads (bload.read_lengths).
BLOAD_API std::string lengths_format(const std::string& path);

}  // namespace bload
