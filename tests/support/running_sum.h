#pragma once
// The running-sum data set of the DDP harness and the C++ tests: the C++ twin of running_sum.py
// beside this file, whose docstring is the definition. Sequence i of a run seeded by `seed`:
// features x float32 [T_i, 16], randn from a CPU generator (mt19937) seeded with
// seed * 1000003 + i; target y [T_i, 1], y_t = (x_0[0] + ... + x_t[0]) / sqrt(t + 1), a scaled
// running sum: a model has to carry state along a sequence, and start each one from a fresh state.
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace bload_test {

constexpr int64_t kRunningSumFeatures = 16;
constexpr uint64_t kSeedStride = 1000003;  // sequence i of seed s draws from s * stride + i

class RunningSum : public torch::data::datasets::Dataset<RunningSum> {
 public:
  RunningSum(std::vector<int64_t> lengths, int64_t seed)
      : lengths_(std::move(lengths)), seed_(seed) {}

  torch::data::Example<> get(size_t index) override {
    const int64_t steps = lengths_.at(index);
    const uint64_t sequence_seed = static_cast<uint64_t>(seed_) * kSeedStride + index;
    auto generator = at::make_generator<at::CPUGeneratorImpl>(sequence_seed);
    auto features = at::randn({steps, kRunningSumFeatures}, generator);
    auto target = features.select(1, 0).cumsum(0) / torch::arange(1, steps + 1).sqrt();
    return {features, target.unsqueeze(1)};
  }

  std::optional<size_t> size() const override { return lengths_.size(); }

 private:
  std::vector<int64_t> lengths_;
  int64_t seed_;
};

}  // namespace bload_test
