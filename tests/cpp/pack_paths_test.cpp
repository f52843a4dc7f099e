// pack's two kernels and the dataset's reads: the device-generic kernel (the one CUDA runs),
// forced here on CPU tensors, dispatches as many operators for a batch of 200 pieces as for one
// (counted with RecordFunction, the profiler's hook) and packs what the CPU kernel packs; the CPU
// kernel dispatches no operator per piece either; BlockDataset reads only the packed steps of a
// dataset that reads ranges, and reuses a batch's buffers once the batch is gone.

#include <ATen/record_function.h>

#include "../../cpp/src/ops/checks.h"  // bload::ops::pack_by_gather, not installed
#include "test_support.h"

namespace pack_paths_test {
namespace {

using bload_test::SyntheticSequences;

thread_local std::vector<std::string> dispatched;

// The operators `call` dispatches on this thread, by name, in order.
std::vector<std::string> operators_of(const std::function<void()>& call) {
  dispatched.clear();
  auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback([](const at::RecordFunction& function)
                                     -> std::unique_ptr<at::ObserverContext> {
        dispatched.emplace_back(function.name());
        return nullptr;
      }).scopes({at::RecordScope::FUNCTION}));
  call();
  at::removeCallback(handle);
  return dispatched;
}

// A batch of `pieces` pieces of 3 steps (of sequences of 5), 4 to a block of 16 steps, and the
// whole sequences [5, 2].
struct Batch {
  at::Tensor table;
  std::vector<at::Tensor> sequences;
  int64_t blocks, t_max = 16;
};

Batch batch_of(int64_t pieces) {
  Batch batch{torch::empty({pieces, bload::kTableColumns}, torch::kLong), {}, (pieces + 3) / 4};
  auto cells = batch.table.accessor<int64_t, 2>();
  for (int64_t row = 0; row < pieces; ++row) {
    const int64_t values[] = {row / 4, (row % 4) * 4, 3, row, 1, 5};
    std::copy(std::begin(values), std::end(values), &cells[row][0]);
    batch.sequences.push_back(torch::arange(10, torch::kFloat).view({5, 2}) + 100 * row);
  }
  return batch;
}

TEST(PackKernels, TheGatherKernelDispatchesAsManyOperatorsForAnyNumberOfPieces) {
  std::vector<std::vector<std::string>> per_size;
  for (int64_t pieces : {1, 20, 200}) {
    auto batch = batch_of(pieces);
    auto gathered = torch::empty({batch.blocks, batch.t_max, 2});
    per_size.push_back(operators_of(
        [&] { bload::ops::pack_by_gather(gathered, batch.sequences, batch.table, -1.0); }));
    EXPECT_TRUE(torch::equal(
        gathered, bload::pack(batch.sequences, batch.table, batch.blocks, batch.t_max, -1.0)));
  }
  EXPECT_FALSE(per_size[0].empty());
  EXPECT_EQ(per_size[0], per_size[1]);
  EXPECT_EQ(per_size[0], per_size[2]);
}

TEST(PackKernels, TheCpuKernelDispatchesNoOperatorPerPiece) {
  std::vector<size_t> counts;
  for (int64_t pieces : {1, 200}) {
    auto batch = batch_of(pieces);
    counts.push_back(operators_of([&] {
                       bload::pack(batch.sequences, batch.table, batch.blocks, batch.t_max, -1.0);
                     }).size());
  }
  EXPECT_EQ(counts[0], counts[1]);
}

// SyntheticSequences that also reads ranges, and counts the steps it returns.
class RangeReader : public SyntheticSequences {
 public:
  using SyntheticSequences::SyntheticSequences;
  torch::data::Example<> get_range(size_t index, int64_t offset, int64_t length) {
    auto whole = get(index);
    steps_read += length;
    return {whole.data.narrow(0, offset, length), whole.target.narrow(0, offset, length)};
  }
  int64_t steps_read = 0;
};
static_assert(bload::ReadsRanges<RangeReader>);
static_assert(!bload::ReadsRanges<SyntheticSequences>);

TEST(BlockDataset, ReadsOnlyThePackedStepsOfADatasetThatReadsRanges) {
  const std::vector<int64_t> lengths{30, 7, 12, 45, 3, 9, 20};
  const auto options = bload::Options(8).blocks_per_batch(3).split_oversized(true);
  auto sampler = bload::BlockSampler(lengths, options);
  auto ranges = bload::BlockDataset(RangeReader(lengths), options);
  auto whole = bload::BlockDataset(SyntheticSequences(lengths), options);
  int64_t packed = 0;
  while (auto request = sampler.next()) {
    auto from_ranges = ranges.get_batch(*request);
    auto from_whole = whole.get_batch(*request);
    EXPECT_TRUE(torch::equal(from_ranges.data, from_whole.data));
    EXPECT_TRUE(torch::equal(from_ranges.target, from_whole.target));
    packed += from_ranges.valid.sum().item<int64_t>();
  }
  EXPECT_EQ(packed, 126);  // every step of the lengths above, once
  EXPECT_EQ(ranges.inner().steps_read, packed);
}

TEST(BlockDataset, ReusesABatchsBuffersOnceTheBatchIsGone) {
  const std::vector<int64_t> lengths{5, 3, 6, 2};
  const auto options = bload::Options(8).blocks_per_batch(2);
  auto request = *bload::BlockSampler(lengths, options).next();
  auto dataset = bload::BlockDataset(SyntheticSequences(lengths), options);

  auto first = dataset.get_batch(request);
  const void* memory = first.data.data_ptr();
  auto held = dataset.get_batch(request);  // `first` is held: fresh memory
  EXPECT_NE(held.data.data_ptr(), memory);
  auto view = first.data[0];
  first = {};
  EXPECT_NE(dataset.get_batch(request).data.data_ptr(), memory);  // a view of it is held
  view.reset();
  auto again = dataset.get_batch(request);
  EXPECT_EQ(again.data.data_ptr(), memory);
  EXPECT_TRUE(torch::equal(again.data, held.data));
}

}  // namespace

}  // namespace pack_paths_test
