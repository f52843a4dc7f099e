#pragma once
// bload::BlockSampler: torch's Sampler interface over bload's epoch plans, one per DDP rank.
//
//   auto sampler = bload::BlockSampler(lengths, bload::Options(94).world_size(W).rank(r));
//   auto loader = torch::data::make_data_loader(
//       bload::BlockDataset(dataset, options), sampler, torch::data::DataLoaderOptions());
//   for (auto& batch : *loader) { ... }   // every rank gets the same number of batches

#include <ATen/core/Dict.h>
#include <torch/data/samplers/base.h>
#include <torch/serialize/archive.h>

#include <cstdint>
#include <istream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bload/export.h"
#include "bload/planner.h"

namespace bload {

// The last epoch a sampler starts: each reset() goes on to the epoch after the last, which must
// be an int64 too (the core's MAX_EPOCH).
inline constexpr int64_t kMaxEpoch = std::numeric_limits<int64_t>::max() - 1;

// Shared between a sampler and every copy of it (make_data_loader keeps its own copy, so the
// caller's object never sees the loader's resets; pytorch/pytorch#73141). Through it the caller
// chooses the next epoch and reads the one being served.
class BLOAD_API EpochHandle {
 public:
  EpochHandle();
  // The next reset() of any copy starts `epoch` (0 to kMaxEpoch), instead of the one after the
  // last.
  void set_epoch(int64_t epoch);
  // The epoch the last reset() started, or -1 before the first.
  int64_t epoch() const;

 private:
  friend class BlockSampler;
  struct State;
  std::shared_ptr<State> state_;
};

class BLOAD_API BlockSampler : public torch::data::samplers::Sampler<BatchRequest> {
 public:
  BlockSampler(const std::vector<int64_t>& lengths, const Options& options);
  BlockSampler(Planner planner, int64_t rank);

  // Starts the next epoch: the first reset() starts epoch 0 (or the one set through the
  // handle), every later one the epoch after. A reset right after load() resumes the loaded
  // position instead, unless the handle set another epoch after the load (or a later one before
  // it, when the state was saved after its epoch's last batch, leaving nothing to resume), or
  // set the loaded epoch again when it was served whole: that epoch starts, as in Python's
  // sampler. `new_size`, when given, must be the number of sequences.
  void reset(std::optional<size_t> new_size = std::nullopt) override;
  // This rank's next batch of the epoch, or nullopt at the end of the epoch. Before any
  // reset(), the first epoch starts by itself. A batch is always blocks_per_batch blocks, so
  // `batch_size` (the DataLoader's) must be 1, its default, or blocks_per_batch: any other is an
  // error, not the silence of a DataLoader dropping every request as smaller than its batch.
  std::optional<BatchRequest> next(size_t batch_size = 1) override;

  // The position in the epoch, so that after load() the next batch is the one that would have
  // come next (sampler_archive.cpp). The archive carries a checksum of its contents: a
  // corrupted, truncated or foreign one is an error. load() checks the archive was saved with
  // the same lengths and options; the world size may differ: then the rest of the saved epoch
  // (the blocks not yet served) is dealt to this sampler's ranks, and later epochs are planned
  // for them. A lanes epoch instead goes on with the same lanes, so it needs the saved lane
  // count (world_size * blocks_per_batch), in any factors; other policies need the saved
  // blocks_per_batch (an archive saved before the first epoch holds no position: any). The rank
  // is this sampler's own.
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
  // The same state as a dict of ints, bools and strings: the format of Python's
  // bload.BlockSampler.state_dict(), so a state saved by either loads into the other
  // (torch::pickle_save and torch.save store it; torch::pickle_load and torch.load read it:
  // torch.load with its default weights_only=True once Python has imported bload, which allows
  // torch.jit._pickle.restore_type_tag, the one function a torch::pickle_save file names).
  c10::Dict<std::string, c10::IValue> state_dict() const;
  void load_state_dict(const c10::Dict<std::string, c10::IValue>& state);
  // The same from a dict as torch::pickle_load returns it (keys must be strings).
  void load_state_dict(const c10::impl::GenericDict& state);

  EpochHandle epoch_handle() const { return handle_; }
  // The epoch being served (-1 before the first reset), and the batches of its plan handed
  // out (after a load() onto another world size, of the plan of the rest of the epoch).
  int64_t epoch() const;
  int64_t position() const { return position_; }
  // Batches every rank runs in the epoch being served (starts the first epoch if none has).
  int64_t batches_per_rank();
  // The plan being served (starts the first epoch if none has).
  const EpochPlan& plan();
  const Planner& planner() const { return planner_; }
  int64_t rank() const { return rank_; }

 private:
  Planner planner_;
  int64_t rank_;
  EpochHandle handle_;
  std::optional<EpochPlan> plan_;
  int64_t next_epoch_ = 0;
  int64_t position_ = 0;
  // Set by load(): the next reset() keeps the loaded position instead of starting an epoch.
  bool resume_on_reset_ = false;
  // Starts of an epoch (reset or load), numbering each pass's requests for read-ahead.
  int64_t pass_ = 0;

  // Takes on the state load() read: the plan being served (none before the first epoch), the
  // batches of it handed out, and the epoch after it.
  void restore(std::optional<EpochPlan> plan, int64_t position, int64_t next_epoch);
  // The state this sampler saves, and a saved one read back (fields named prefix + name + suffix
  // in errors); a failed read leaves the sampler as it was.
  SamplerState state() const;
  void restore_state(const SamplerState& state, const std::string& prefix,
                     const std::string& suffix);
};

// torch::serialize::InputArchive::load_from, from a stream or a file, with every failure of
// torch's reader a c10::Error that says the archive is corrupted, truncated or not a torch
// archive: torch's own may be of other types (torch::jit::ErrorReport) or name only its internals.
// For checkpoints that hold a sampler's archive (sampler_archive.cpp).
BLOAD_API void read_archive(torch::serialize::InputArchive& archive, std::istream& stream);
BLOAD_API void read_archive(torch::serialize::InputArchive& archive, const std::string& path);

}  // namespace bload
