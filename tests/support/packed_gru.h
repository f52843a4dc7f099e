#pragma once
// The recurrent test model, in C++: a GRU cell stepped over each packed block, its state zeroed
// wherever the block table starts a sequence, and a linear head on every step; forward_lanes runs
// a batch of the lanes policy, going on from each row's carried state. packed_gru.py beside this
// file is the same model for TorchScript (examples/cpp/packed_gru.h is the examples' own copy).
#include <bload/ops.h>
#include <torch/torch.h>

#include <utility>
#include <vector>

struct PackedGRUImpl : torch::nn::Module {
  PackedGRUImpl(int64_t features, int64_t hidden, int64_t outputs)
      : cell(register_module("cell", torch::nn::GRUCell(features, hidden))),
        head(register_module("head", torch::nn::Linear(hidden, outputs))) {}

  // data [blocks, t_max, features] and the batch's block table -> [blocks, t_max, outputs].
  torch::Tensor forward(const torch::Tensor& data, const torch::Tensor& table) {
    const int64_t blocks = data.size(0), t_max = data.size(1);
    // 0 on the first step of every piece, so the state a piece starts from is zero.
    auto keep = bload::reset_mask(table, blocks, t_max).logical_not();
    return run(data, keep, torch::zeros({blocks, cell->options.hidden_size()}, data.options()))
        .first;
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

  torch::nn::GRUCell cell;
  torch::nn::Linear head;
};
TORCH_MODULE(PackedGRU);
