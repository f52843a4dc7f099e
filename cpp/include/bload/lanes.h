#pragma once
// bload::LaneState: every lane's recurrent state for the "lanes" policy, kept,
// handed to the model and checkpointed by the library instead of by each training loop.
//
// Row j of every batch of rank r is lane r * blocks_per_batch + j for the whole epoch, and a
// batch's `carry` [blocks] says which rows go on from the state their lane had at the end of the
// previous batch. A LaneState holds this rank's lanes' states, [blocks_per_batch, *shape] (lanes
// first):
//
//   bload::LaneState lanes(sampler, {hidden});
//   for (auto& batch : *loader) {
//     auto [outputs, final] = model.forward_lanes(batch.data, batch.table, lanes.initial(batch));
//     lanes.update(batch, final);   // detached: truncated back-propagation
//   }
//   auto every_lane = lanes.gathered(all_gather);   // a checkpoint holds [lanes, *shape]
//
// A varlen kernel with one state per piece takes lanes.initial_pieces(batch) and hands its final
// states to lanes.update_pieces(batch, final_states) instead. Python's bload.LaneState is the
// same, with the same checks.

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

#include "bload/dataset.h"
#include "bload/export.h"
#include "bload/sampler.h"

namespace bload {

class BLOAD_API LaneState {
 public:
  // This rank's lanes of `sampler` (its world size, rank and blocks per batch), `shape` each, zero.
  LaneState(const BlockSampler& sampler, std::vector<int64_t> shape,
            const at::TensorOptions& options = {});

  // [blocks, *shape]: each row's lane state where `batch` carries it, zero elsewhere (on the
  // state's device): the state a model starts the batch from.
  at::Tensor initial(const PackedBatch& batch) const;
  // Keeps `final_state` [blocks, *shape], the rows' states at the end of `batch` (detached unless
  // `detach` is false).
  void update(const PackedBatch& batch, const at::Tensor& final_state, bool detach = true);

  // For a kernel that runs over cu_seqlens with a state per piece (docs/state_kernels.md):
  // [pieces, *shape], each piece's initial state in cu_seqlens order, its row's lane state where
  // `batch.state_in` names the row, zero elsewhere.
  at::Tensor initial_pieces(const PackedBatch& batch) const;
  // Keeps, for each row, the final state of the piece `batch.state_out` names, from
  // `final_states` [pieces, *shape]; the other rows' lanes keep theirs (detached unless `detach`
  // is false).
  void update_pieces(const PackedBatch& batch, const at::Tensor& final_states, bool detach = true);

  // Every lane's state [lanes, *shape] on the CPU. With more than one rank, `all_gather` takes
  // this rank's rows and returns every rank's, in rank order (a collective, e.g. through c10d);
  // every rank calls it.
  at::Tensor gathered(const std::function<at::Tensor(const at::Tensor&)>& all_gather = {}) const;
  // Takes this rank's rows of `every_lane` (what gathered() returned on a run of the same lane
  // count, in any factors); another lane count or shape is an error naming both.
  void load(const at::Tensor& every_lane);

  const at::Tensor& rows() const { return state_; }
  int64_t lanes() const { return lanes_; }

 private:
  void check(const PackedBatch& batch) const;

  int64_t lanes_, rows_, rank_;
  std::vector<int64_t> shape_;
  at::Tensor state_;
};

}  // namespace bload
