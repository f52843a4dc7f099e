// `make bench`'s C++ slow-items rows (docs/benchmarks/slow_items.md, "C++"): how much of an epoch
// a C++ training loop waits for its next batch when items take a heavy-tailed time to prepare,
// with bload::BlockDataset read by torch's DataLoader worker threads (no pool) and with
// bload::ItemPool, the same number of threads each. benches/slow_items.py's setting: 900
// sequences of lognormal lengths (median 100, sigma 0.6, at most t_max = 256), blocks of 4, item
// i waits 2 ms, or 40 ms for a seeded 10% of the items (with --uniform every item waits their
// mean), a step of 20 ms. A timing, not a test: each loader serves an epoch in turn, for several
// rounds, and the figures are medians.
//
//   build/slow_items_bench [--uniform] [--rounds 5] [--workers 4]

#include <bload/bload.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kTMax = 256, kBlocks = 4, kFeatures = 8, kSequences = 900;
constexpr double kFastMs = 2.0, kSlowMs = 40.0, kSlowShare = 0.1, kStepMs = 20.0;

// Item i: data float [T_i, 8] and target int64 [T_i], made once; get(i) waits its cost first, as
// a decoder would spend it, so an item's time is the wait alone, the same in every loader.
struct SlowItems {
  std::shared_ptr<const std::vector<torch::data::Example<>>> items;
  std::shared_ptr<const std::vector<double>> cost_ms;

  std::optional<size_t> size() const { return items->size(); }
  torch::data::Example<> get(size_t index) {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>((*cost_ms)[index]));
    return (*items)[index];
  }
};

struct Epoch {
  double wall_s = 0, wait_s = 0;
  int64_t batches = 0;
};

// One epoch of `loader`: the wait is the epoch's wall time less the steps' (the loop does
// nothing else), the first batch's (the workers' start) included.
template <typename Loader>
Epoch run(Loader& loader) {
  Epoch epoch;
  double steps_s = 0;
  const auto start = Clock::now();
  for (auto& batch : loader) {
    (void)batch;
    const auto step = Clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(kStepMs));
    steps_s += std::chrono::duration<double>(Clock::now() - step).count();
    ++epoch.batches;
  }
  epoch.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  epoch.wait_s = epoch.wall_s - steps_s;
  return epoch;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  bool uniform = false;
  int rounds = 5, workers = 4;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--uniform")) {
      uniform = true;
    } else if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--workers") && i + 1 < argc) {
      workers = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--uniform] [--rounds N] [--workers N]\n", argv[0]);
      return 2;
    }
  }
  torch::set_num_threads(1);
  std::mt19937_64 rng(1);
  std::lognormal_distribution<double> length(std::log(100.0), 0.6);
  std::bernoulli_distribution slow(kSlowShare);
  std::vector<int64_t> lengths;
  auto items = std::make_shared<std::vector<torch::data::Example<>>>();
  auto cost = std::make_shared<std::vector<double>>();
  const double mean_ms = (1 - kSlowShare) * kFastMs + kSlowShare * kSlowMs;
  for (int64_t i = 0; i < kSequences; ++i) {
    const auto steps = std::clamp<int64_t>(static_cast<int64_t>(length(rng)), 1, kTMax);
    lengths.push_back(steps);
    auto target = torch::arange(steps, torch::kLong) + i;
    items->push_back(
        {target.to(torch::kFloat).unsqueeze(1).expand({steps, kFeatures}).clone(), target});
    const bool is_slow = slow(rng);
    cost->push_back(uniform ? mean_ms : is_slow ? kSlowMs : kFastMs);
  }
  const SlowItems dataset{items, cost};
  const auto options = bload::Options(kTMax).blocks_per_batch(kBlocks);

  auto no_pool = [&] {
    auto loader = torch::data::make_data_loader(
        bload::BlockDataset(dataset, options), bload::BlockSampler(lengths, options),
        torch::data::DataLoaderOptions().workers(static_cast<size_t>(workers)));
    return run(*loader);
  };
  auto pool = [&] {
    auto loader = torch::data::make_data_loader(
        bload::BlockDataset(dataset, options, bload::ItemPool(workers)),
        bload::BlockSampler(lengths, options), torch::data::DataLoaderOptions());
    return run(*loader);
  };
  std::vector<double> share_no_pool, share_pool;
  int64_t batches = 0;
  for (int round = 0; round < rounds; ++round) {  // alternating, so both see the same machine
    const auto a = no_pool(), b = pool();
    share_no_pool.push_back(a.wait_s / a.wall_s);
    share_pool.push_back(b.wait_s / b.wall_s);
    batches = a.batches;
  }
  char items_are[64];
  if (uniform) {
    std::snprintf(items_are, sizeof items_are, "every item %.1f ms", mean_ms);
  } else {
    std::snprintf(items_are, sizeof items_are, "%.0f ms, %.0f%% of them %.0f ms", kFastMs,
                  100 * kSlowShare, kSlowMs);
  }
  std::printf(
      "items: %s; %lld batches of %lld blocks, a %.0f ms step, %d threads each, "
      "median of %d rounds\n",
      items_are, static_cast<long long>(batches), static_cast<long long>(kBlocks), kStepMs, workers,
      rounds);
  auto row = [](const char* what, const std::vector<double>& shares) {
    std::printf("%-56s %6.1f%%  (rounds:", what, 100 * median(shares));
    for (double share : shares) std::printf(" %.1f%%", 100 * share);
    std::printf(")\n");
  };
  row("wait, BlockDataset, DataLoader worker threads, no pool", share_no_pool);
  row("wait, BlockDataset + ItemPool, no DataLoader workers", share_pool);
  return 0;
}
