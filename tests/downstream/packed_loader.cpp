// Packed batches for every DDP rank through libtorch's DataLoader: the C++ usage in README.md.
//   packed_loader <lengths file> [world size]

#include <bload/bload.h>
#include <torch/torch.h>

#include <iostream>

// A map-style dataset of variable-length sequences: per-step features [T_i, 16] and a class label
// per step [T_i].
class Clips : public torch::data::datasets::Dataset<Clips> {
 public:
  explicit Clips(std::vector<int64_t> lengths) : lengths_(std::move(lengths)) {}

  torch::data::Example<> get(size_t index) override {
    const int64_t steps = lengths_.at(index);
    return {torch::randn({steps, 16}), torch::randint(0, 10, {steps})};
  }

  std::optional<size_t> size() const override { return lengths_.size(); }

 private:
  std::vector<int64_t> lengths_;
};

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::cerr << "usage: packed_loader <lengths file> [world size]\n";
    return 2;
  }
  const auto lengths = bload::read_lengths(argv[1]);
  const int64_t world_size = argc > 2 ? std::stoll(argv[2]) : 2;

  for (int64_t rank = 0; rank < world_size; ++rank) {  // each DDP process runs one rank
    auto options = bload::Options(94)
                       .blocks_per_batch(8)
                       .world_size(world_size)
                       .rank(rank)
                       .target_padding(-100);  // CrossEntropyLoss's ignore_index
    auto loader = torch::data::make_data_loader(
        bload::BlockDataset(Clips(lengths), options), bload::BlockSampler(lengths, options),
        torch::data::DataLoaderOptions().workers(2));

    int64_t batches = 0, padding = 0, steps = 0;
    for (auto& batch : *loader) {
      // batch.data [8, 94, 16], batch.target [8, 94], batch.reset / batch.valid [8, 94], ...
      ++batches;
      padding += (~batch.valid).sum().item<int64_t>();
      steps += batch.valid.numel();
      TORCH_CHECK((batch.target.masked_select(~batch.valid) == -100).all().item<bool>(),
                  "padding steps of the target must hold the ignore index");
    }
    std::cout << "rank " << rank << ": " << batches << " batches of [8, 94, 16], padding "
              << 100.0 * padding / steps << "% of steps\n";
  }
  return 0;
} catch (const c10::Error& error) {
  std::cerr << "error: " << error.what_without_backtrace() << "\n";
  return 1;
}
