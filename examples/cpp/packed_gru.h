#pragma once
// The recurrent model of the DDP demos, in C++: a GRU cell stepped over each packed block, its
// state zeroed wherever the block table starts a sequence, and a linear head on every step.
// examples/packed_gru.py is the same model for TorchScript.
#include <bload/ops.h>
#include <torch/torch.h>

#include <vector>

struct PackedGRUImpl : torch::nn::Module {
  PackedGRUImpl(int64_t features, int64_t hidden, int64_t outputs)
      : cell(register_module("cell", torch::nn::GRUCell(features, hidden))),
        head(register_module("head", torch::nn::Linear(hidden, outputs))) {}

  // data [blocks, t_max, features] and the batch's block table -> [blocks, t_max, outputs].
  torch::Tensor forward(const torch::Tensor& data, const torch::Tensor& table) {
    const int64_t blocks = data.size(0), t_max = data.size(1);
    // 0 on the first step of every piece, so the state a piece starts from is zero.
    auto keep = bload::reset_mask(table, blocks, t_max).logical_not().to(data.options());
    auto state = torch::zeros({blocks, cell->options.hidden_size()}, data.options());
    std::vector<torch::Tensor> states;
    states.reserve(t_max);
    for (int64_t step = 0; step < t_max; ++step) {
      state = cell(data.select(1, step), state * keep.select(1, step).unsqueeze(1));
      states.push_back(state);
    }
    return head(torch::stack(states, 1));
  }

  torch::nn::GRUCell cell;
  torch::nn::Linear head;
};
TORCH_MODULE(PackedGRU);
