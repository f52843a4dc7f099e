// bload's C++ model from the installed package: <bload/nn/packed_gru.h> compiles and links in a
// project that find_package(bload)s (docs/models.md), and steps a packed batch.
#include <bload/bload.h>
#include <bload/nn/packed_gru.h>

#include <iostream>
#include <vector>

int main() {
  const std::vector<int64_t> lengths{5, 3, 8, 2, 7, 4, 6, 1, 9, 3};
  bload::Planner planner(lengths, bload::Options(9).blocks_per_batch(2).split_oversized(true));
  const auto table = planner.plan(0).batch(0, 0).table;
  bload::nn::PackedGRU model(/*features=*/4, /*hidden=*/16, /*outputs=*/1);
  const auto outputs = model->forward(torch::randn({2, 9, 4}), table);
  if (outputs.sizes() != at::IntArrayRef({2, 9, 1}) || !outputs.isfinite().all().item<bool>()) {
    std::cerr << "PackedGRU: expected finite outputs [2, 9, 1], got " << outputs.sizes() << "\n";
    return 1;
  }
  std::cout << "PackedGRU outputs " << outputs.sizes() << "\n";
}
