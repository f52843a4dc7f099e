// Packed batches: bload::BlockDataset's packing (checked by hand), pinned memory and its errors, a
// DataLoader with worker threads, and the example model trained on packed blocks.

#include <bload/nn/packed_gru.h>

#include "test_support.h"

namespace packing_test {
namespace {

using bload_test::action_genome_lengths;
using bload_test::contains;
using bload_test::error_of;
using bload_test::SyntheticSequences;

TEST(BlockDataset, PacksAHandComputedBatch) {
  // Block 0: sequence 0 (3 steps), sequence 1 (2 steps), 1 step of padding.
  // Block 1: steps 2..5 of sequence 2 (6 steps, split), 2 steps of padding.
  const std::vector<int64_t> lengths{3, 2, 6};
  bload::BatchRequest request{
      torch::tensor({0, 0, 3, 0, 0, 3, 0, 3, 2, 1, 0, 2, 1, 0, 4, 2, 2, 6}, torch::kLong)
          .view({3, 6}),
      2, 6};
  auto dataset = bload::BlockDataset(SyntheticSequences(lengths),
                                     bload::Options(6).data_padding(-1).target_padding(-100));
  auto batch = dataset.get_batch(request);

  auto data =
      torch::tensor({0, 1, 2, 1000, 1001, -1, 2002, 2003, 2004, 2005, -1, -1}, torch::kFloat)
          .view({2, 6});
  auto padding = data == -1;
  EXPECT_TRUE(torch::equal(batch.data.select(2, 0), data));
  EXPECT_TRUE(torch::equal(batch.data.select(2, 1), torch::where(padding, data, -data)));
  EXPECT_TRUE(torch::equal(
      batch.target, torch::tensor({0, 0, 0, 1, 1, -100, 2, 2, 2, 2, -100, -100}).view({2, 6})));
  EXPECT_TRUE(torch::equal(
      batch.reset,
      torch::tensor({1, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0}).to(torch::kBool).view({2, 6})));
  EXPECT_TRUE(torch::equal(batch.valid, ~padding));
  EXPECT_TRUE(torch::equal(
      batch.segment_ids,
      torch::tensor({0, 0, 0, 1, 1, -1, 0, 0, 0, 0, -1, -1}, torch::kInt).view({2, 6})));
  EXPECT_TRUE(
      torch::equal(batch.position_ids,
                   torch::tensor({0, 1, 2, 0, 1, 0, 2, 3, 4, 5, 0, 0}, torch::kLong).view({2, 6})));
  EXPECT_TRUE(torch::equal(batch.cu_seqlens, torch::tensor({0, 3, 5, 9}, torch::kInt)));
  EXPECT_TRUE(torch::equal(batch.indices, torch::tensor({0, 1, 2}, torch::kLong)));
  // Sequences 0 and 1 end in block 0; sequence 2's piece ends it too (steps 2..5 of 6).
  EXPECT_TRUE(torch::equal(
      batch.ends,
      torch::tensor({0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0}).to(torch::kBool).view({2, 6})));
  EXPECT_FALSE(batch.carry.any().item<bool>());
  // unpack gives the pieces back.
  auto pieces = bload::unpack(batch.data, request.table);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_TRUE(torch::equal(pieces[2], SyntheticSequences(lengths).get(2).data.slice(0, 2)));
}

TEST(BlockDataset, PacksAHandComputedLanesBatch) {
  // Rows 0 and 1 are lanes 2 and 3 (rank 1 of 2 rows a rank). Lane 2 goes on with steps 3..4 of
  // sequence 0 (5 steps), then starts sequence 1 (2 steps); lane 3 starts sequence 2 (9 steps),
  // whose steps 0..3 fill its window.
  const std::vector<int64_t> lengths{5, 2, 9};
  bload::BatchRequest request{
      torch::tensor({0, 0, 2, 0, 3, 5, 0, 2, 2, 1, 0, 2, 1, 0, 4, 2, 0, 9}, torch::kLong)
          .view({3, 6}),
      2, 4, /*carry=*/true, /*first_lane=*/2};
  auto batch =
      bload::BlockDataset(SyntheticSequences(lengths), bload::Options(4)).get_batch(request);

  auto bools = [](std::vector<int64_t> values) {
    return torch::tensor(values).to(torch::kBool).view({2, 4});
  };
  EXPECT_TRUE(torch::equal(
      batch.data.select(2, 0),
      torch::tensor({3, 4, 1000, 1001, 2000, 2001, 2002, 2003}, torch::kFloat).view({2, 4})));
  // Resets only where a sequence starts: sequence 0 goes on from the state lane 2 carried.
  EXPECT_TRUE(torch::equal(batch.reset, bools({0, 0, 1, 0, 1, 0, 0, 0})));
  EXPECT_TRUE(torch::equal(batch.ends, bools({0, 1, 0, 1, 0, 0, 0, 0})));
  EXPECT_TRUE(torch::equal(batch.carry, torch::tensor({true, false})));
  EXPECT_TRUE(torch::equal(batch.lanes, torch::tensor({2, 3}, torch::kLong)));
  EXPECT_TRUE(batch.valid.all().item<bool>());
  EXPECT_TRUE(torch::equal(batch.position_ids,
                           torch::tensor({3, 4, 0, 1, 0, 1, 2, 3}, torch::kLong).view({2, 4})));
}

TEST(BlockDataset, PinsMemoryWhereACudaDeviceIsPresent) {
  const auto lengths = action_genome_lengths();
  const auto options = bload::Options(94).blocks_per_batch(4);
  auto request = *bload::BlockSampler(lengths, options).next();
  auto pinned =
      bload::BlockDataset(SyntheticSequences(lengths), bload::Options(options).pin_memory(true))
          .get_batch(request);
  auto plain = bload::BlockDataset(SyntheticSequences(lengths), options).get_batch(request);
  // Without a device, pinning falls back to ordinary memory (with a warning).
  EXPECT_EQ(pinned.data.is_pinned(), torch::cuda::is_available());
  EXPECT_EQ(pinned.target.is_pinned(), torch::cuda::is_available());
  EXPECT_TRUE(torch::equal(pinned.data, plain.data));
  EXPECT_TRUE(torch::equal(pinned.target, plain.target));
}

TEST(BlockDataset, RejectsExamplesOfTheWrongLength) {
  // The sampler plans with lengths that disagree with the dataset's sequences.
  const std::vector<int64_t> planned{3, 2, 4};
  auto sampler = bload::BlockSampler(planned, bload::Options(9));
  auto dataset = bload::BlockDataset(SyntheticSequences({3, 2, 5}), bload::Options(9));
  auto message = error_of([&] { dataset.get_batch(*sampler.next()); });
  EXPECT_TRUE(contains(message, "has 5 steps: expected 4, the length of sequence 2"));
}

// A table whose sequences 7 and 2 come back in later rows (pieces of a split sequence in other
// blocks of the batch): read whole, each sequence is read once, at its first row, in row order,
// and every row gets its sequence's value; read as ranges, one read a row.
TEST(BlockDataset, ReadsEachSequenceOnceAtItsFirstRow) {
  const std::vector<int64_t> sequences{7, 2, 9, 7, 2, 7};
  auto table = torch::zeros({6, 6}, torch::kInt64);  // six rows of the six TableColumns
  for (int64_t row = 0; row < 6; ++row) {
    table[row][bload::kSequence] = sequences[row];
    table[row][bload::kOffset] = 10 * row;
    table[row][bload::kLength] = row + 1;
  }
  std::vector<std::string> whole;
  std::vector<torch::data::Example<>> values;
  for (const auto& read : bload::item_reads(table, false)) {
    whole.push_back(read.call());
    values.push_back({torch::full({1}, static_cast<double>(read.index)), torch::zeros({1})});
  }
  EXPECT_EQ(whole, (std::vector<std::string>{"get(7)", "get(2)", "get(9)"}));
  const auto [data, target] = bload::examples_by_row(table, false, values);
  ASSERT_EQ(data.size(), sequences.size());
  for (size_t row = 0; row < sequences.size(); ++row)
    EXPECT_EQ(data[row].item<double>(), sequences[row]) << "row " << row;
  const auto ranges = bload::item_reads(table, true);
  ASSERT_EQ(ranges.size(), 6u);
  EXPECT_EQ(ranges[3].call(), "get_range(7, 30, 4)");
}

// Every batch of one epoch through a DataLoader with `workers` threads.
std::vector<bload::PackedBatch> loader_epoch(const std::vector<int64_t>& lengths,
                                             const bload::Options& options, size_t workers) {
  auto loader = torch::data::make_data_loader(
      bload::BlockDataset(SyntheticSequences(lengths), options),
      bload::BlockSampler(lengths, options), torch::data::DataLoaderOptions().workers(workers));
  std::vector<bload::PackedBatch> batches;
  for (auto& batch : *loader) batches.push_back(batch);
  return batches;
}

TEST(DataLoader, WithWorkersMatchesTheMainThread) {
  const auto lengths = action_genome_lengths();
  const auto options = bload::Options(94).blocks_per_batch(32).world_size(2).rank(1);
  auto main_thread = loader_epoch(lengths, options, 0);
  auto threaded = loader_epoch(lengths, options, 3);
  ASSERT_FALSE(main_thread.empty());
  ASSERT_EQ(main_thread.size(), threaded.size());
  for (size_t i = 0; i < main_thread.size(); ++i) {
    SCOPED_TRACE("batch " + std::to_string(i));
    EXPECT_TRUE(torch::equal(main_thread[i].data, threaded[i].data));
    EXPECT_TRUE(torch::equal(main_thread[i].target, threaded[i].target));
    EXPECT_TRUE(torch::equal(main_thread[i].reset, threaded[i].reset));
    // Every real step holds the sequence it belongs to: its target (the sequence's index) is
    // its first feature's thousands.
    const auto& batch = main_thread[i];
    auto from_data = (batch.data.select(2, 0).masked_select(batch.valid) / 1000).floor();
    EXPECT_TRUE(torch::equal(batch.target.masked_select(batch.valid), from_data.to(torch::kLong)));
  }
}

// One step of bload::nn::PackedGRU (<bload/nn/packed_gru.h>) on packed blocks with resets has the
// gradients of the same sequences run one at a time, summed (a summed squared error on real steps
// either way).
TEST(PackedGRU, GradientsEqualTheSumOverSequencesRunAlone) {
  torch::manual_seed(5);
  bload::nn::PackedGRU model(3, 8, 1);
  auto lengths = torch::randint(1, 24, {60}, torch::kLong);
  std::vector<int64_t> length_list(lengths.data_ptr<int64_t>(), lengths.data_ptr<int64_t>() + 60);
  bload::Planner planner(length_list, bload::Options(24).blocks_per_batch(4).seed(5));
  const auto table = planner.plan(0).batch(0, 0).table;
  const int64_t pieces = table.size(0);
  ASSERT_GT(pieces, 4);  // several sequences share a block

  std::vector<torch::Tensor> data, target;
  for (int64_t row = 0; row < pieces; ++row) {
    const int64_t steps = table[row][bload::kLength].item<int64_t>();
    data.push_back(torch::randn({steps, 3}));
    target.push_back(torch::randn({steps, 1}));
  }
  auto gradients = [&](const torch::Tensor& loss) {
    model->zero_grad();
    loss.backward();
    std::vector<torch::Tensor> grads;
    for (const auto& parameter : model->parameters()) grads.push_back(parameter.grad().clone());
    return grads;
  };
  auto valid = bload::valid_mask(table, 4, 24).unsqueeze(2);
  auto packed_out = model->forward(bload::pack(data, table, 4, 24, 0.0), table);
  auto packed =
      gradients(((packed_out - bload::pack(target, table, 4, 24, 0.0)).pow(2) * valid).sum());

  std::vector<torch::Tensor> alone;
  for (const auto& grad : packed) alone.push_back(torch::zeros_like(grad));
  for (int64_t row = 0; row < pieces; ++row) {
    const int64_t steps = data[row].size(0);
    auto single =
        torch::tensor({int64_t{0}, int64_t{0}, steps, int64_t{0}, int64_t{0}, steps}).view({1, 6});
    auto out = model->forward(data[row].unsqueeze(0), single);
    auto grads = gradients((out - target[row].unsqueeze(0)).pow(2).sum());
    for (size_t k = 0; k < grads.size(); ++k) alone[k] += grads[k];
  }
  for (size_t k = 0; k < packed.size(); ++k)
    EXPECT_TRUE(torch::allclose(packed[k], alone[k], /*rtol=*/1e-5, /*atol=*/1e-5))
        << "parameter " << k;
  // Without resets inside the blocks (a table with one 24-step piece per block), state leaks
  // from one sequence into the next and the gradients differ: the check above can fail.
  auto no_resets = torch::zeros({4, 6}, torch::kLong);
  for (int64_t block = 0; block < 4; ++block)
    no_resets[block] =
        torch::tensor({block, int64_t{0}, int64_t{24}, block, int64_t{0}, int64_t{24}});
  auto leaked_out = model->forward(bload::pack(data, table, 4, 24, 0.0), no_resets);
  auto leaked =
      gradients(((leaked_out - bload::pack(target, table, 4, 24, 0.0)).pow(2) * valid).sum());
  bool differs = false;
  for (size_t k = 0; k < leaked.size(); ++k)
    differs |= !torch::allclose(leaked[k], alone[k], 1e-5, 1e-5);
  EXPECT_TRUE(differs);
}

}  // namespace

}  // namespace packing_test
