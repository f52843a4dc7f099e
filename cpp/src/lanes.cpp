// bload::LaneState (bload/lanes.h): this rank's lanes' states, the batch checks, and gathering and
// taking back every lane's state for a checkpoint.

#include "bload/lanes.h"

#include <ATen/ATen.h>

namespace bload {

LaneState::LaneState(const BlockSampler& sampler, std::vector<int64_t> shape,
                     const at::TensorOptions& options)
    : lanes_(sampler.planner().options().world_size() *
             sampler.planner().options().blocks_per_batch()),
      rows_(sampler.planner().options().blocks_per_batch()),
      rank_(sampler.rank()),
      shape_(std::move(shape)) {
  std::vector<int64_t> sizes{rows_};
  sizes.insert(sizes.end(), shape_.begin(), shape_.end());
  state_ = at::zeros(sizes, options);
}

void LaneState::check(const PackedBatch& batch) const {
  const int64_t first = rank_ * rows_;
  const int64_t batch_first = batch.lanes.numel() ? batch.lanes[0].item<int64_t>() : -1;
  TORCH_CHECK(batch.lanes.numel() == rows_ && batch_first == first,
              "bload::LaneState: a batch of lanes ", batch_first, " to ",
              batch_first + batch.lanes.numel() - 1, ": expected this rank's lanes ", first, " to ",
              first + rows_ - 1, " (from the sampler this LaneState was made with)");
}

at::Tensor LaneState::initial(const PackedBatch& batch) const {
  check(batch);
  std::vector<int64_t> view{rows_};
  view.insert(view.end(), shape_.size(), 1);
  const auto carry = batch.carry.to(state_.device()).view(view);
  return at::where(carry, state_, at::zeros({}, state_.options()));
}

void LaneState::update(const PackedBatch& batch, const at::Tensor& final_state, bool detach) {
  check(batch);
  TORCH_CHECK(final_state.sizes() == state_.sizes(),
              "bload::LaneState::update: final_state has "
              "shape ",
              final_state.sizes(), ": expected ", state_.sizes(), ", a state per row");
  state_ = detach ? final_state.detach() : final_state;
}

at::Tensor LaneState::initial_pieces(const PackedBatch& batch) const {
  check(batch);
  const auto state_in = batch.state_in.to(state_.device());
  std::vector<int64_t> view{state_in.numel()};
  view.insert(view.end(), shape_.size(), 1);
  const auto seeded = state_in.ge(0).view(view);
  return at::where(seeded, state_.index_select(0, state_in.clamp_min(0)),
                   at::zeros({}, state_.options()));
}

void LaneState::update_pieces(const PackedBatch& batch, const at::Tensor& final_states,
                              bool detach) {
  check(batch);
  std::vector<int64_t> expected{batch.table.size(0)};
  expected.insert(expected.end(), shape_.begin(), shape_.end());
  TORCH_CHECK(final_states.sizes() == c10::IntArrayRef(expected),
              "bload::LaneState::"
              "update_pieces: final_states has shape ",
              final_states.sizes(), ": expected ", c10::IntArrayRef(expected),
              ", a state per piece");
  if (expected[0] == 0) return;  // a batch of padding only: no lane changes
  const auto state_out = batch.state_out.to(final_states.device());
  std::vector<int64_t> view{rows_};
  view.insert(view.end(), shape_.size(), 1);
  const auto kept = state_out.ge(0).view(view);
  auto state = at::where(kept, final_states.index_select(0, state_out.clamp_min(0)),
                         state_.to(final_states.device()));
  state_ = detach ? state.detach() : state;
}

at::Tensor LaneState::gathered(
    const std::function<at::Tensor(const at::Tensor&)>& all_gather) const {
  const auto mine = state_.detach().contiguous();
  if (lanes_ == rows_) return mine.cpu();
  TORCH_CHECK(static_cast<bool>(all_gather), "bload::LaneState::gathered: ", lanes_ / rows_,
              " ranks hold the lanes: expected an all_gather to collect them");
  auto every_lane = all_gather(mine);
  std::vector<int64_t> sizes{lanes_};
  sizes.insert(sizes.end(), shape_.begin(), shape_.end());
  TORCH_CHECK(every_lane.numel() == c10::multiply_integers(sizes),
              "bload::LaneState::gathered: "
              "all_gather returned ",
              every_lane.sizes(), ": expected every rank's rows, ", sizes);
  return every_lane.reshape(sizes).cpu();
}

void LaneState::load(const at::Tensor& every_lane) {
  std::vector<int64_t> sizes{lanes_};
  sizes.insert(sizes.end(), shape_.begin(), shape_.end());
  TORCH_CHECK(every_lane.defined() && every_lane.dim() >= 1 && every_lane.size(0) == lanes_,
              "bload::LaneState::load: the saved lanes are ",
              every_lane.defined() ? every_lane.sizes() : c10::IntArrayRef{}, ": expected ", lanes_,
              " lanes (world_size * blocks_per_batch), the lane count this "
              "run has; lanes resume with the lane count they were saved with");
  TORCH_CHECK(every_lane.sizes() == c10::IntArrayRef(sizes),
              "bload::LaneState::load: the saved "
              "lanes' state is ",
              every_lane.sizes(), ": expected ", c10::IntArrayRef(sizes));
  state_ = every_lane.narrow(0, rank_ * rows_, rows_).to(state_.options());
}

}  // namespace bload
