#pragma once
// bload::nn::PackedGRU: a GRU cell stepped over each packed block, its state zeroed wherever the
// block table starts a piece (bload::reset_mask), so no state leaks from one sequence into the
// next one packed behind it, and a linear head on every step; forward_lanes runs a batch of the
// lanes policy, going on from each row's carried state.
//
// Python's bload.nn.PackedGRU is the same module, for eager PyTorch and TorchScript, with the same
// parameter names (cell.weight_ih, ..., head.bias), so weights move between the two
// (tests/python/test_nn.py checks that both compute the same outputs). Header only: it needs
// <torch/torch.h>, which bload's other headers do not include.
//
//   bload::nn::PackedGRU model(/*features=*/16, /*hidden=*/64, /*outputs=*/1);
//   auto outputs = model->forward(batch.data, batch.table);  // [blocks, t_max, outputs]
#include <bload/ops.h>
#include <torch/torch.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace bload::nn {

class PackedGRUImpl : public torch::nn::Module {
 public:
  PackedGRUImpl(int64_t features, int64_t hidden, int64_t outputs)
      : cell(register_module("cell", torch::nn::GRUCell(features, hidden))),
        head(register_module("head", torch::nn::Linear(hidden, outputs))) {}

  // data [blocks, t_max, features] and the batch's block table -> [blocks, t_max, outputs].
  // Every piece starts from a zero state.
  torch::Tensor forward(const torch::Tensor& data, const torch::Tensor& table) {
    const int64_t blocks = data.size(0), t_max = data.size(1);
    auto keep = bload::reset_mask(table, blocks, t_max).logical_not();
    return run(data, keep, torch::zeros({blocks, hidden()}, data.options())).first;
  }

  // A batch of the lanes policy: each row goes on from `state` [blocks, hidden] (its lane's final
  // state after the previous batch) where `carry` [blocks] is true, from zero elsewhere, and
  // resets only where a sequence starts. Returns the outputs and the final state (to pass on,
  // detached for truncated back-propagation).
  std::pair<torch::Tensor, torch::Tensor> forward_lanes(const torch::Tensor& data,
                                                        const torch::Tensor& table,
                                                        const torch::Tensor& carry,
                                                        const torch::Tensor& state) {
    auto keep = bload::reset_mask(table, data.size(0), data.size(1), /*carry=*/true).logical_not();
    return run(data, keep, state * carry.to(state.options()).unsqueeze(1));
  }

  // The state's width, which a trainer needs to allocate lane states.
  int64_t hidden() const { return cell->options.hidden_size(); }

  torch::nn::GRUCell cell;
  torch::nn::Linear head;

 private:
  // keep is 0 on the steps where the state resets: multiplying zeroes it there, and keeps the
  // step differentiable everywhere else.
  std::pair<torch::Tensor, torch::Tensor> run(const torch::Tensor& data, const torch::Tensor& keep,
                                              torch::Tensor state) {
    const auto keep_steps = keep.to(data.options());
    std::vector<torch::Tensor> states;
    states.reserve(data.size(1));
    for (int64_t step = 0; step < data.size(1); ++step) {
      state = cell(data.select(1, step), state * keep_steps.select(1, step).unsqueeze(1));
      states.push_back(state);
    }
    return {head(torch::stack(states, 1)), state};
  }
};
TORCH_MODULE(PackedGRU);

}  // namespace bload::nn
