// The item pool in C++ (bload/item_pool.h, docs/read_ahead.md "Slow items"): batches the same bit
// for bit with and without it (several workers, more workers than items, max_items 1, DataLoader
// worker threads); reads in plan order, ahead of the batch asked for, never more at once than
// the bounds, or with a cost the costliest first (the cost asked once a read); an item (or its
// cost) that throws named with its batch, every pool thread joined; a resumed epoch read from the
// resumed batch on; bad options refused by name. tests/python/test_item_pool.py checks Python's
// side.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "test_support.h"

namespace item_pool_test {
namespace {

const std::vector<int64_t> kLengths{5, 17, 3, 40, 9, 22, 1, 30, 12, 7, 26, 14, 8, 19, 2, 33, 11, 6};

// What the copies of one dataset share: the reads made (in the order they started), how many
// run at once and at most, the copies alive (each pool thread holds one), and what to fail.
struct Shared {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<bload::ItemRead> reads;
  int in_flight = 0;
  int peak = 0;
  int meet = 1;  // until this many have been in flight at once, a read waits (up to a second)
  std::atomic<int> live{0};
  std::optional<std::pair<size_t, int64_t>> fail_at;  // the piece (index, offset) that throws
  bool throw_int = false;  // throw an int there instead of a std::exception
};

// Sequence i's steps are 1000 i + t (data) and i (target); every third sequence takes 2 ms more.
// With Ranges it reads pieces (bload::ReadsRanges), else whole sequences.
template <bool Ranges>
struct SlowClips {
  std::shared_ptr<Shared> shared = std::make_shared<Shared>();

  SlowClips() { ++shared->live; }
  SlowClips(const SlowClips& other) : shared(other.shared) { ++shared->live; }
  SlowClips(SlowClips&& other) noexcept : shared(other.shared) { ++shared->live; }
  SlowClips& operator=(const SlowClips&) = default;
  ~SlowClips() { --shared->live; }

  std::optional<size_t> size() const { return kLengths.size(); }
  torch::data::Example<> get(size_t index) { return prepare({index, 0, kLengths.at(index), true}); }
  torch::data::Example<> get_range(size_t index, int64_t offset, int64_t length)
    requires Ranges
  {
    return prepare({index, offset, length, false});
  }

 private:
  torch::data::Example<> prepare(const bload::ItemRead& read) {
    {
      std::unique_lock<std::mutex> lock(shared->mutex);
      shared->reads.push_back(read);
      shared->peak = std::max(shared->peak, ++shared->in_flight);
      shared->changed.notify_all();
      shared->changed.wait_for(lock, std::chrono::seconds(1),
                               [&] { return shared->peak >= shared->meet; });
    }
    if (read.index % 3 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    {
      std::lock_guard<std::mutex> lock(shared->mutex);
      --shared->in_flight;
      shared->changed.notify_all();
      if (shared->fail_at == std::pair{read.index, read.offset}) {
        if (shared->throw_int) throw 7;
        throw std::runtime_error("decoder: corrupt clip");
      }
    }
    auto steps = torch::arange(read.offset, read.offset + read.length, torch::kLong);
    return {(steps + 1000 * int64_t(read.index)).to(torch::kFloat).unsqueeze(1),
            torch::full({read.length}, int64_t(read.index))};
  }
};
static_assert(bload::ReadsRanges<SlowClips<true>> && !bload::ReadsRanges<SlowClips<false>>);

bload::Options options(int64_t read_ahead) {
  return bload::Options(16).blocks_per_batch(2).split_oversized(true).seed(3).read_ahead(
      read_ahead);
}

// The rest of the sampler's pass, batch by batch, as a loader without workers runs it.
template <typename Dataset>
std::vector<bload::PackedBatch> rest(bload::BlockSampler& sampler, Dataset& dataset) {
  std::vector<bload::PackedBatch> batches;
  while (auto request = sampler.next()) batches.push_back(dataset.get_batch(*request));
  return batches;
}

// Epoch `epoch`'s batches without a pool.
template <bool Ranges>
std::vector<bload::PackedBatch> plain_epoch(int64_t read_ahead, int64_t epoch = 0) {
  bload::BlockSampler sampler(kLengths, options(read_ahead));
  sampler.epoch_handle().set_epoch(epoch);
  sampler.reset();
  bload::BlockDataset<SlowClips<Ranges>> dataset(SlowClips<Ranges>(), options(read_ahead));
  return rest(sampler, dataset);
}

void expect_same(const std::vector<bload::PackedBatch>& got,
                 const std::vector<bload::PackedBatch>& expected, const std::string& what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    auto a = got[i], b = expected[i];
    for (const auto& name : bload::PackedBatch::field_names()) {
      EXPECT_TRUE(a.field(name).dtype() == b.field(name).dtype() &&
                  torch::equal(a.field(name), b.field(name)))
          << what << ": batch " << i << ", field " << name;
    }
    EXPECT_EQ(a.max_seqlen, b.max_seqlen) << what << ": batch " << i;
    EXPECT_EQ(a.global.valid, b.global.valid) << what << ": batch " << i;
  }
}

// Epoch 0's tables, from a sampler of their own.
std::vector<at::Tensor> epoch0_tables(int64_t read_ahead) {
  bload::BlockSampler sampler(kLengths, options(read_ahead));
  return bload_test::epoch_tables(sampler);
}

// The reads of every table, in plan order.
std::vector<bload::ItemRead> planned_reads(const std::vector<at::Tensor>& tables, bool ranges) {
  std::vector<bload::ItemRead> reads;
  for (const auto& table : tables) {
    for (const auto& read : bload::item_reads(table, ranges)) reads.push_back(read);
  }
  return reads;
}

std::vector<std::string> calls(const std::vector<bload::ItemRead>& reads) {
  std::vector<std::string> out;
  for (const auto& read : reads) out.push_back(read.call());
  return out;
}

template <bool Ranges>
void batches_are_the_plans() {
  for (int64_t read_ahead : {0, 2}) {
    const auto expected = plain_epoch<Ranges>(read_ahead);
    ASSERT_GT(expected.size(), 4u);
    // Several workers; more workers than items (a batch holds a few); one item at a time.
    const auto longest_first = [](size_t, int64_t, int64_t length) { return double(length); };
    for (const auto& pool :
         {bload::ItemPool(3), bload::ItemPool(64), bload::ItemPool(4).max_items(1),
          bload::ItemPool(2).max_bytes(1), bload::ItemPool(3).cost(longest_first)}) {
      bload::BlockSampler sampler(kLengths, options(read_ahead));
      bload::BlockDataset<SlowClips<Ranges>> dataset(SlowClips<Ranges>(), options(read_ahead),
                                                     pool);
      expect_same(rest(sampler, dataset), expected,
                  "ranges " + std::to_string(Ranges) + ", read_ahead " +
                      std::to_string(read_ahead) + ", workers " + std::to_string(pool.workers()) +
                      ", max_items " + std::to_string(pool.max_items()));
    }
  }
}

TEST(ItemPool, BatchesAreThePlansWithAndWithoutIt) {
  batches_are_the_plans<true>();
  batches_are_the_plans<false>();
}

TEST(ItemPool, BatchesAreThePlansThroughDataLoaderWorkers) {
  const std::vector<std::vector<bload::PackedBatch>> expected{plain_epoch<true>(3, 0),
                                                              plain_epoch<true>(3, 1)};
  for (size_t loader_workers : {0, 3}) {
    auto loader = torch::data::make_data_loader(
        bload::BlockDataset<SlowClips<true>>(SlowClips<true>(), options(3), bload::ItemPool(4)),
        bload::BlockSampler(kLengths, options(3)),
        torch::data::DataLoaderOptions().workers(loader_workers));
    for (size_t epoch = 0; epoch < expected.size(); ++epoch) {  // each a new pass of the pool
      std::vector<bload::PackedBatch> batches;
      for (auto& batch : *loader) batches.push_back(batch);
      expect_same(
          batches, expected[epoch],
          std::to_string(loader_workers) + " loader workers, epoch " + std::to_string(epoch));
    }
  }
}

TEST(ItemPool, ReadsInPlanOrderOneAtATimeWithMaxItems1) {
  bload::BlockSampler sampler(kLengths, options(2));
  const auto planned = planned_reads(epoch0_tables(2), true);
  SlowClips<true> clips;
  bload::BlockDataset<SlowClips<true>> dataset(clips, options(2), bload::ItemPool(4).max_items(1));
  rest(sampler, dataset);
  EXPECT_EQ(clips.shared->peak, 1);
  EXPECT_EQ(calls(clips.shared->reads), calls(planned));
}

TEST(ItemPool, NeverReadsMoreAtOnceThanItsWorkersOrMaxItems) {
  for (const auto& [workers, max_items] : {std::pair{2, 8}, std::pair{4, 3}, std::pair{3, 24}}) {
    bload::BlockSampler sampler(kLengths, options(4));
    SlowClips<true> clips;
    // Every read waits (up to a second) for another: the pool reads several at once, or the
    // peak stays 1.
    clips.shared->meet = 2;
    bload::BlockDataset<SlowClips<true>> dataset(clips, options(4),
                                                 bload::ItemPool(workers).max_items(max_items));
    rest(sampler, dataset);
    EXPECT_GE(clips.shared->peak, 2) << workers << " workers";
    EXPECT_LE(clips.shared->peak, std::min(workers, max_items)) << workers << " workers";
  }
}

TEST(ItemPool, ReadsTheBatchesAheadBeforeTheyAreAskedFor) {
  bload::BlockSampler sampler(kLengths, options(2));
  const auto tables = epoch0_tables(2);
  SlowClips<true> clips;
  bload::BlockDataset<SlowClips<true>> dataset(clips, options(2), bload::ItemPool(2));
  dataset.get_batch(*sampler.next());
  // Batches 1 and 2 are in reach: their reads are made with no batch asked for.
  const auto due = planned_reads({tables.begin(), tables.begin() + 3}, true).size();
  std::unique_lock<std::mutex> lock(clips.shared->mutex);
  EXPECT_TRUE(clips.shared->changed.wait_for(lock, std::chrono::seconds(30), [&] {
    return clips.shared->reads.size() >= due && clips.shared->in_flight == 0;
  }));
  EXPECT_EQ(clips.shared->reads.size(), due);  // and nothing further
}

TEST(ItemPool, AFreeThreadTakesTheCostliestReadStartedFirst) {
  bload::BlockSampler sampler(kLengths, options(2));
  SlowClips<true> clips;
  // One thread, and room for every read in reach: all of them are started at the first batch,
  // and none after it (no other batch is asked for).
  auto pool = bload::ItemPool(1).max_items(1000).cost(
      [](size_t, int64_t, int64_t length) { return double(length); });
  bload::BlockDataset<SlowClips<true>> dataset(clips, options(2), pool);
  const auto request = *sampler.next();
  const auto in_reach =
      planned_reads({request.table, request.ahead.at(0), request.ahead.at(1)}, true);
  dataset.get_batch(request);
  std::unique_lock<std::mutex> lock(clips.shared->mutex);
  ASSERT_TRUE(clips.shared->changed.wait_for(lock, std::chrono::seconds(30), [&] {
    return clips.shared->reads.size() >= in_reach.size() && clips.shared->in_flight == 0;
  }));
  auto expected = in_reach;  // the longest first, ties in plan order
  std::stable_sort(expected.begin(), expected.end(),
                   [](const auto& a, const auto& b) { return a.length > b.length; });
  ASSERT_NE(calls(expected), calls(in_reach));  // the cost changes the order here
  EXPECT_EQ(calls(clips.shared->reads), calls(expected));
}

TEST(ItemPool, TheCostOfEachReadIsAskedOnce) {
  // Each request prepares only the batches no caller has registered yet, with workers asking in
  // any order too.
  auto planned = calls(planned_reads(epoch0_tables(3), true));
  std::sort(planned.begin(), planned.end());
  for (size_t loader_workers : {0, 3}) {
    std::mutex mutex;
    std::vector<std::string> asked;
    auto pool = bload::ItemPool(2).cost([&](size_t index, int64_t offset, int64_t length) {
      std::lock_guard<std::mutex> lock(mutex);
      asked.push_back(bload::ItemRead{index, offset, length, false}.call());
      return double(length);
    });
    auto loader = torch::data::make_data_loader(
        bload::BlockDataset<SlowClips<true>>(SlowClips<true>(), options(3), pool),
        bload::BlockSampler(kLengths, options(3)),
        torch::data::DataLoaderOptions().workers(loader_workers));
    for (auto& batch : *loader) ASSERT_GT(batch.global.valid, 0);
    std::lock_guard<std::mutex> lock(mutex);
    std::sort(asked.begin(), asked.end());
    EXPECT_EQ(asked, planned) << loader_workers << " loader workers";
  }
}

TEST(ItemPool, ACostThatThrowsOrIsNaNIsNamed) {
  for (bool nan : {false, true}) {
    bload::BlockSampler sampler(kLengths, options(2));
    auto pool = bload::ItemPool(2).cost([nan](size_t index, int64_t, int64_t) -> double {
      if (index != 3) return 1.0;
      if (nan) return std::nan("");
      throw std::runtime_error("no length for clip 3");
    });
    bload::BlockDataset<SlowClips<true>> dataset(SlowClips<true>(), options(2), pool);
    std::string message;
    try {
      while (auto request = sampler.next()) dataset.get_batch(*request);
    } catch (const c10::Error& error) {
      message = error.what_without_backtrace();
    }
    EXPECT_TRUE(bload_test::contains(message, "bload item pool: cost(3, "));
    EXPECT_TRUE(bload_test::contains(
        message, nan ? ", is NaN: expected a number" : ", threw: no length for clip 3"));
  }
}

TEST(ItemPool, AnItemThatThrowsNamesItsBatchAndStopsThePool) {
  for (bool throw_int : {false, true}) {
    bload::BlockSampler sampler(kLengths, options(2));
    const auto tables = epoch0_tables(2);
    const auto failing = bload::item_reads(tables.at(3), true).at(0);
    const auto expected = plain_epoch<true>(2);
    sampler.reset();
    SlowClips<true> clips;
    clips.shared->fail_at = {failing.index, failing.offset};
    clips.shared->throw_int = throw_int;
    bload::BlockDataset<SlowClips<true>> dataset(clips, options(2), bload::ItemPool(3));
    const int copies = clips.shared->live;  // the test's, the dataset's and the pool's prototype
    std::vector<bload::PackedBatch> before;
    for (int i = 0; i < 3; ++i) before.push_back(dataset.get_batch(*sampler.next()));
    expect_same(before, {expected.begin(), expected.begin() + 3}, "before the failing batch");
    auto message = bload_test::error_of([&] { dataset.get_batch(*sampler.next()); });
    EXPECT_TRUE(bload_test::contains(
        message, "bload item pool: dataset." + failing.call() + ", an item of batch 3, threw: "));
    EXPECT_TRUE(bload_test::contains(message,
                                     throw_int ? "not a std::exception" : "decoder: corrupt clip"));
    EXPECT_EQ(clips.shared->live, copies) << "a pool thread is left running";
    // The pass's later batches are refused, naming where it stopped.
    message = bload_test::error_of([&] { dataset.get_batch(*sampler.next()); });
    EXPECT_TRUE(bload_test::contains(
        message, "bload item pool: batch 4 is not read: its pass stopped at batch 3, where "));
    // A new pass (epoch 1) reads again.
    clips.shared->fail_at.reset();
    sampler.reset();
    expect_same(rest(sampler, dataset), plain_epoch<true>(2, 1), "the next epoch");
  }
}

TEST(ItemPool, ABatchSkippedByHandHoldsNoPlaceForGood) {
  // With one item at a time, the skipped batches' first items (in reach, so started) would hold
  // the only place while the loop waits for the next batch's.
  const auto expected = plain_epoch<true>(2);
  bload::BlockSampler sampler(kLengths, options(2));
  bload::BlockDataset<SlowClips<true>> dataset(SlowClips<true>(), options(2),
                                               bload::ItemPool(2).max_items(1));
  std::vector<bload::PackedBatch> got, due;
  for (size_t index = 0; auto request = sampler.next(); ++index) {
    if (index == 2 || index == 3) continue;
    got.push_back(dataset.get_batch(*request));
    due.push_back(expected.at(index));
  }
  expect_same(got, due, "batches 2 and 3 skipped");
}

TEST(ItemPool, ThreadsEndWithTheEpochAndWithTheDataset) {
  SlowClips<false> clips;
  {
    bload::BlockSampler sampler(kLengths, options(2));
    bload::BlockDataset<SlowClips<false>> dataset(clips, options(2), bload::ItemPool(4));
    const int copies = clips.shared->live;
    rest(sampler, dataset);
    EXPECT_EQ(clips.shared->live, copies);
    sampler.reset();
    dataset.get_batch(*sampler.next());  // a pass left part-way: the dataset's end joins them
  }
  EXPECT_EQ(clips.shared->live, 1);  // the test's own
}

TEST(ItemPool, AResumedEpochIsReadFromTheResumedBatch) {
  for (int64_t k : {1, 4}) {
    bload::BlockSampler original(kLengths, options(2));
    const auto tables = epoch0_tables(2);
    const auto expected = plain_epoch<true>(2);
    original.reset();
    for (int64_t i = 0; i < k; ++i) original.next();
    bload::BlockSampler resumed(kLengths, options(2));
    bload_test::load(resumed, bload_test::saved(original));
    resumed.reset();
    SlowClips<true> clips;
    bload::BlockDataset<SlowClips<true>> dataset(clips, options(2),
                                                 bload::ItemPool(3).max_items(4));
    expect_same(rest(resumed, dataset), {expected.begin() + k, expected.end()},
                "resumed at " + std::to_string(k));
    // Only the reads of the batches from k on, each once.
    auto read = calls(clips.shared->reads),
         due = calls(planned_reads({tables.begin() + k, tables.end()}, true));
    std::sort(read.begin(), read.end());
    std::sort(due.begin(), due.end());
    EXPECT_EQ(read, due) << "resumed at " << k;
  }
}

TEST(ItemPool, ABadOptionIsRefusedByName) {
  const auto most = bload::max_pool_workers();
  for (int64_t bad : {int64_t{0}, most + 1}) {
    EXPECT_TRUE(bload_test::contains(bload_test::error_of([&] { bload::ItemPool pool(bad); }),
                                     "workers = " + std::to_string(bad) +
                                         ": expected an int from 1 to " + std::to_string(most)));
  }
  EXPECT_TRUE(bload_test::contains(bload_test::error_of([] { bload::ItemPool(2).max_items(0); }),
                                   "max_items = 0: expected"));
  EXPECT_TRUE(bload_test::contains(bload_test::error_of([] { bload::ItemPool(2).max_bytes(-5); }),
                                   "max_bytes = -5: expected"));
  EXPECT_EQ(bload::ItemPool(3).max_items(), 3 * bload::default_items_per_worker());
  EXPECT_GE(bload::default_items_per_worker(), 1);
  EXPECT_FALSE(bload::ItemPool(3).max_bytes());
}

// docs/read_ahead.md's example ("In C++"), its lines as written there (the loop's body ours),
// over this test's dataset.
TEST(ItemPool, TheDocsExampleRuns) {
  using Clips = SlowClips<false>;
  const auto& lengths = kLengths;
  int64_t batches = 0;
  auto options = bload::Options(1024).blocks_per_batch(8).read_ahead(4);
  bload::BlockDataset<Clips> dataset(Clips(), options, bload::ItemPool(8).max_items(64));
  auto loader =
      torch::data::make_data_loader(std::move(dataset), bload::BlockSampler(lengths, options),
                                    torch::data::DataLoaderOptions().workers(2));
  for (auto& batch : *loader) batches += batch.data.defined();
  EXPECT_EQ(batches, bload::Planner(lengths, options).plan(0).batches_per_rank());
}

}  // namespace

}  // namespace item_pool_test
