// Read-ahead from the plan in C++ (docs/read_ahead.md): BlockDataset calls the inner dataset's
// prefetch hook for exactly the pieces of the next read_ahead batches, in plan order, before
// they are read; batches are the same with it as without; a bad read_ahead is refused by name; a
// hook that throws is reported. tests/python/test_read_ahead.py checks Python's side.

#include <memory>
#include <tuple>
#include <vector>

#include "bload/sequence_store.h"
#include "test_support.h"

namespace read_ahead_test {
namespace {

using Piece = std::tuple<int64_t, int64_t, int64_t>;  // sequence, offset, length
const std::vector<int64_t> kLengths{5, 17, 3, 40, 9, 22, 1, 30, 12, 7, 26, 14, 8, 19, 2, 33, 11, 6};

static_assert(bload::PrefetchesTables<bload::SequenceStore>);

// Sequence i's steps are 1000 i + t; every read and prefetch is recorded in order (false: a
// read), and prefetching `fail_at` throws.
struct Recorded {
  std::shared_ptr<std::vector<std::pair<bool, Piece>>> calls =
      std::make_shared<std::vector<std::pair<bool, Piece>>>();
  std::optional<Piece> fail_at;

  std::optional<size_t> size() const { return kLengths.size(); }
  torch::data::Example<> get(size_t index) { return get_range(index, 0, kLengths.at(index)); }
  torch::data::Example<> get_range(size_t index, int64_t offset, int64_t length) {
    calls->push_back({false, {static_cast<int64_t>(index), offset, length}});
    auto steps = torch::arange(offset, offset + length, torch::kLong) + 1000 * int64_t(index);
    return {steps.to(torch::kFloat).unsqueeze(1), steps};
  }
  void prefetch(size_t index, int64_t offset, int64_t length) {
    const Piece piece{static_cast<int64_t>(index), offset, length};
    if (fail_at == piece) throw std::runtime_error("network storage: piece unreachable");
    calls->push_back({true, piece});
  }
};
static_assert(bload::PrefetchesPieces<Recorded>);

bload::Options options(int64_t read_ahead) {
  return bload::Options(16).blocks_per_batch(2).split_oversized(true).seed(3).read_ahead(
      read_ahead);
}

std::vector<Piece> pieces(const at::Tensor& table) {
  std::vector<Piece> out;
  auto cells = table.accessor<int64_t, 2>();
  for (int64_t row = 0; row < table.size(0); ++row) {
    out.emplace_back(cells[row][bload::kSequence], cells[row][bload::kOffset],
                     cells[row][bload::kLength]);
  }
  return out;
}

// One epoch through sampler and dataset, as a loader without workers runs it.
std::vector<bload::PackedBatch> epoch(Recorded inner, int64_t read_ahead) {
  bload::BlockSampler sampler(kLengths, options(read_ahead));
  bload::BlockDataset<Recorded> dataset(std::move(inner), options(read_ahead));
  std::vector<bload::PackedBatch> batches;
  while (auto request = sampler.next()) batches.push_back(dataset.get_batch(*request));
  return batches;
}

TEST(ReadAhead, StartsTheNextBatchesPiecesInPlanOrder) {
  for (int64_t read_ahead : {1, 3, 100}) {
    bload::BlockSampler sampler(kLengths, options(read_ahead));
    std::vector<std::vector<Piece>> planned;
    for (const auto& table : bload_test::epoch_tables(sampler)) planned.push_back(pieces(table));
    ASSERT_GT(planned.size(), 4u);
    Recorded inner;
    epoch(inner, read_ahead);
    std::vector<Piece> started, expected;
    for (const auto& [prefetch, piece] : *inner.calls) {
      if (prefetch) started.push_back(piece);
    }
    for (const auto& batch : planned) expected.insert(expected.end(), batch.begin(), batch.end());
    EXPECT_EQ(started, expected) << "read_ahead = " << read_ahead;
    // Before batch j's first read, the pieces of batches 0 ... j + read_ahead were started.
    size_t call = 0, prefetched = 0, through = 0;
    for (size_t j = 0; j < planned.size(); ++j) {
      while ((*inner.calls)[call].first) ++call, ++prefetched;
      through = std::min(j + read_ahead, planned.size() - 1);
      size_t due = 0;
      for (size_t b = 0; b <= through; ++b) due += planned[b].size();
      EXPECT_EQ(prefetched, due) << "batch " << j << ", read_ahead = " << read_ahead;
      call += planned[j].size();
    }
  }
}

TEST(ReadAhead, NoHookIsCalledWithout) {
  Recorded inner;
  epoch(inner, 0);
  for (const auto& [prefetch, piece] : *inner.calls) EXPECT_FALSE(prefetch);
}

TEST(ReadAhead, BatchesAreTheSameWithAndWithout) {
  auto plain = epoch(Recorded(), 0), ahead = epoch(Recorded(), 4);
  ASSERT_EQ(plain.size(), ahead.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_TRUE(torch::equal(plain[i].data, ahead[i].data));
    EXPECT_TRUE(torch::equal(plain[i].target, ahead[i].target));
    EXPECT_TRUE(torch::equal(plain[i].table, ahead[i].table));
  }
}

TEST(ReadAhead, AnotherPassStartsItsBatchesAgain) {
  bload::BlockSampler sampler(kLengths, options(2));
  Recorded inner;
  bload::BlockDataset<Recorded> dataset(inner, options(2));
  for (int pass = 0; pass < 2; ++pass) {
    sampler.reset();
    inner.calls->clear();
    size_t expected = 0;
    while (auto request = sampler.next()) {
      expected += request->table.size(0);
      dataset.get_batch(*request);
    }
    size_t started = 0;
    for (const auto& [prefetch, piece] : *inner.calls) started += prefetch;
    EXPECT_EQ(started, expected) << "pass " << pass;
  }
}

TEST(ReadAhead, ABadReadAheadIsRefusedByName) {
  for (int64_t bad : {int64_t{-1}, bload::max_read_ahead() + 1}) {
    auto message =
        bload_test::error_of([&] { bload::BlockSampler sampler(kLengths, options(bad)); });
    EXPECT_TRUE(bload_test::contains(
        message, "read_ahead = " + std::to_string(bad) + ": expected an int from 0"));
  }
  EXPECT_EQ(bload::Options(16).read_ahead(), bload::default_read_ahead());
}

TEST(ReadAhead, AHookThatThrowsIsReported) {
  bload::BlockSampler sampler(kLengths, options(2));
  auto tables = bload_test::epoch_tables(sampler);
  Recorded inner;
  inner.fail_at = pieces(tables.at(2)).at(0);
  const auto [sequence, offset, length] = *inner.fail_at;
  auto message = bload_test::error_of([&] { epoch(inner, 2); });
  EXPECT_TRUE(bload_test::contains(
      message, "bload read-ahead: dataset.prefetch(" + std::to_string(sequence) + ", " +
                   std::to_string(offset) + ", " + std::to_string(length) +
                   ") threw: network storage: piece unreachable"));
}

}  // namespace

}  // namespace read_ahead_test
