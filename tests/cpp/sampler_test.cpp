// bload::BlockSampler: the DDP contract (equal batch counts, every step once), epochs, the epoch
// handle, and the errors of bad arguments (save/load: sampler_archive_test.cpp).

#include "test_support.h"

#include <algorithm>
#include <limits>

namespace sampler_test {
namespace {

using bload_test::action_genome_lengths;
using bload_test::contains;
using bload_test::epoch_tables;
using bload_test::error_of;
using bload_test::expect_exactly_once;
using bload_test::same_tables;
using bload_test::SyntheticSequences;

TEST(BlockSampler, RanksGetEqualBatchesAndEveryStepOnce) {
  const auto lengths = action_genome_lengths();
  for (int64_t world_size : {1, 2, 3, 8}) {
    SCOPED_TRACE("world_size = " + std::to_string(world_size));
    std::vector<std::vector<at::Tensor>> per_rank;
    for (int64_t rank = 0; rank < world_size; ++rank) {
      bload::BlockSampler sampler(
          lengths, bload::Options(94).world_size(world_size).rank(rank).blocks_per_batch(4));
      per_rank.push_back(epoch_tables(sampler));
      EXPECT_EQ(per_rank.back().size(), per_rank.front().size());
      EXPECT_EQ(static_cast<int64_t>(per_rank.back().size()), sampler.batches_per_rank());
    }
    EXPECT_FALSE(per_rank.front().empty());
    expect_exactly_once(lengths, per_rank);
  }
}

// Every request carries its global batch (every rank's batch of its index): the ranks' steps
// and pieces together, the same at any factoring of the global batch's blocks, with the loss
// scales world_size / valid and world_size / (valid - pieces); the packed batch keeps them.
TEST(BlockSampler, RequestsCarryTheirGlobalBatch) {
  const auto lengths = action_genome_lengths();
  std::vector<bload::GlobalBatch> one_rank;
  for (int64_t world_size : {1, 2, 4}) {
    SCOPED_TRACE("world_size = " + std::to_string(world_size));
    std::vector<std::vector<bload::BatchRequest>> per_rank(world_size);
    for (int64_t rank = 0; rank < world_size; ++rank) {
      bload::BlockSampler sampler(
          lengths,
          bload::Options(94).world_size(world_size).rank(rank).blocks_per_batch(8 / world_size));
      sampler.reset();
      while (auto request = sampler.next()) per_rank[rank].push_back(*request);
    }
    for (size_t index = 0; index < per_rank[0].size(); ++index) {
      int64_t valid = 0, pieces = 0;
      for (const auto& requests : per_rank) {
        const auto& table = requests[index].table;
        valid += table.select(1, bload::kLength).sum().item<int64_t>();
        pieces += table.size(0);
        EXPECT_EQ(requests[index].global.valid, per_rank[0][index].global.valid);
      }
      const auto& global = per_rank[0][index].global;
      ASSERT_EQ(global.valid, valid);
      ASSERT_EQ(global.pieces, pieces);
      EXPECT_EQ(global.loss_scale, static_cast<double>(world_size) / valid);
      EXPECT_EQ(global.shifted_loss_scale, static_cast<double>(world_size) / (valid - pieces));
      if (world_size == 1) {
        one_rank.push_back(global);
      } else {
        EXPECT_EQ(global.valid, one_rank.at(index).valid);
        EXPECT_EQ(global.pieces, one_rank.at(index).pieces);
      }
    }
    auto dataset = bload::BlockDataset(SyntheticSequences(lengths), bload::Options(94));
    const auto batch = dataset.get_batch(per_rank[0][0]);
    EXPECT_EQ(batch.global.valid, per_rank[0][0].global.valid);
    EXPECT_EQ(batch.loss_scale(), per_rank[0][0].global.loss_scale);
    EXPECT_EQ(batch.loss_scale(true), per_rank[0][0].global.shifted_loss_scale);
  }
}

TEST(BlockSampler, SplitSequencesAreCoveredOnce) {
  const auto lengths = bload::read_lengths(BLOAD_DATA_DIR "/speech_like.lengths");
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  const auto options = bload::Options(longest / 3).world_size(2).split_oversized(true);
  std::vector<std::vector<at::Tensor>> per_rank;
  for (int64_t rank = 0; rank < 2; ++rank) {
    bload::BlockSampler sampler(lengths, bload::Options(options).rank(rank));
    per_rank.push_back(epoch_tables(sampler));
  }
  EXPECT_EQ(per_rank[0].size(), per_rank[1].size());
  expect_exactly_once(lengths, per_rank);
  const auto stats = bload::Planner(lengths, options).plan(0).stats();
  EXPECT_GT(stats.split_sequences, 0);
}

TEST(BlockSampler, EpochsAdvanceOnResetAndDiffer) {
  const auto lengths = action_genome_lengths();
  bload::BlockSampler sampler(lengths, bload::Options(94).world_size(2).rank(1));
  EXPECT_EQ(sampler.epoch(), -1);
  auto first = epoch_tables(sampler);
  EXPECT_EQ(sampler.epoch(), 0);
  auto second = epoch_tables(sampler);
  EXPECT_EQ(sampler.epoch(), 1);
  EXPECT_FALSE(same_tables(first, second));
  // A sampler built again replays the same epochs: plans depend on (lengths, options, epoch).
  bload::BlockSampler again(lengths, bload::Options(94).world_size(2).rank(1));
  EXPECT_TRUE(same_tables(epoch_tables(again), first));
  EXPECT_TRUE(same_tables(epoch_tables(again), second));
}

TEST(BlockSampler, EpochHandleReachesTheLoaderCopy) {
  const auto lengths = action_genome_lengths();
  const auto options = bload::Options(94).blocks_per_batch(8);
  bload::BlockSampler sampler(lengths, options);
  auto handle = sampler.epoch_handle();
  auto loader =
      torch::data::make_data_loader(bload::BlockDataset(SyntheticSequences(lengths), options),
                                    sampler, torch::data::DataLoaderOptions());
  auto tables_of_next_epoch = [&] {
    std::vector<at::Tensor> tables;
    for (auto& batch : *loader) tables.push_back(batch.table);
    return tables;
  };
  auto epoch0 = tables_of_next_epoch();
  EXPECT_EQ(handle.epoch(), 0);
  auto epoch1 = tables_of_next_epoch();
  EXPECT_EQ(handle.epoch(), 1);
  EXPECT_FALSE(same_tables(epoch0, epoch1));
  handle.set_epoch(7);
  auto epoch7 = tables_of_next_epoch();
  EXPECT_EQ(handle.epoch(), 7);
  // The caller's own sampler was never reset: the loader iterated its copy.
  EXPECT_EQ(sampler.epoch(), -1);
  const auto plan = bload::Planner(lengths, options).plan(7);
  ASSERT_EQ(static_cast<int64_t>(epoch7.size()), plan.batches_per_rank());
  for (int64_t b = 0; b < plan.batches_per_rank(); ++b)
    EXPECT_TRUE(torch::equal(epoch7[b], plan.batch(0, b).table)) << "batch " << b;
  EXPECT_EQ(handle.epoch(), 7);
  tables_of_next_epoch();
  EXPECT_EQ(handle.epoch(), 8);
}

TEST(BlockSampler, ABatchSizeOtherThanOneOrBlocksPerBatchIsAnError) {
  const auto lengths = action_genome_lengths();
  const auto options = bload::Options(94).blocks_per_batch(8);
  const auto expected =
      "bload::BlockSampler: batch_size = 64: expected 1 (the DataLoader's default) or "
      "blocks_per_batch = 8: a bload batch is always blocks_per_batch blocks; set "
      "blocks_per_batch in bload::Options, not the DataLoader's batch_size";
  bload::BlockSampler sampler(lengths, options);
  EXPECT_TRUE(contains(error_of([&] { sampler.next(64); }), expected));
  EXPECT_TRUE(contains(error_of([&] { sampler.next(0); }), "batch_size = 0: expected 1"));
  EXPECT_EQ(sampler.position(), 0);
  EXPECT_EQ(sampler.next(1)->blocks, 8);
  EXPECT_EQ(sampler.next(8)->blocks, 8);

  // Through a DataLoader (which asks the sampler for requests from the thread iterating it, with
  // or without workers): the error reaches the loop instead of an epoch of no batches.
  const int64_t batches = bload::Planner(lengths, options).plan(0).batches_per_rank();
  for (size_t workers : {0, 2}) {
    SCOPED_TRACE("workers = " + std::to_string(workers));
    auto count_batches = [&](size_t batch_size) {
      auto loader = torch::data::make_data_loader(
          bload::BlockDataset(SyntheticSequences(lengths), options),
          bload::BlockSampler(lengths, options),
          torch::data::DataLoaderOptions().batch_size(batch_size).drop_last(true).workers(workers));
      int64_t count = 0;
      for (auto& batch : *loader) count += batch.data.size(0) == 8 ? 1 : 0;
      return count;
    };
    EXPECT_TRUE(contains(error_of([&] { count_batches(64); }), expected));
    EXPECT_EQ(count_batches(8), batches);
    EXPECT_EQ(count_batches(1), batches);
  }
}

TEST(BlockSampler, EpochsStopOneShortOfTheLargestInt64) {
  const auto lengths = action_genome_lengths();
  bload::BlockSampler sampler(lengths, bload::Options(94));
  auto handle = sampler.epoch_handle();
  constexpr int64_t kLargest = std::numeric_limits<int64_t>::max();
  EXPECT_TRUE(contains(error_of([&] { handle.set_epoch(kLargest); }),
                       "epoch = 9223372036854775807: expected an epoch from 0 to "
                       "9223372036854775806 (the sampler goes on to the epoch after it)"));
  EXPECT_TRUE(
      contains(error_of([&] { handle.set_epoch(-1); }), "epoch = -1: expected an epoch from 0"));
  handle.set_epoch(bload::kMaxEpoch);
  sampler.reset();
  EXPECT_EQ(sampler.epoch(), bload::kMaxEpoch);
  EXPECT_TRUE(sampler.next().has_value());
  // Saved and loaded there, it goes no further either.
  bload::BlockSampler loaded(lengths, bload::Options(94));
  bload_test::load(loaded, bload_test::saved(sampler));
  EXPECT_EQ(loaded.epoch(), bload::kMaxEpoch);
  EXPECT_EQ(loaded.position(), 1);
  const auto no_epoch_after =
      "bload::BlockSampler::reset: epoch = 9223372036854775807: expected an epoch from 0 to "
      "9223372036854775806";
  EXPECT_TRUE(contains(error_of([&] { sampler.reset(); }), no_epoch_after));
  EXPECT_EQ(sampler.epoch(), bload::kMaxEpoch);
  loaded.reset();  // resumes the loaded epoch
  EXPECT_TRUE(contains(error_of([&] { loaded.reset(); }), no_epoch_after));
  EXPECT_EQ(loaded.epoch(), bload::kMaxEpoch);
  EXPECT_EQ(handle.epoch(), bload::kMaxEpoch);
}

TEST(BlockSampler, RejectsBadArguments) {
  const auto lengths = action_genome_lengths();
  EXPECT_TRUE(contains(error_of([&] { bload::BlockSampler(lengths, bload::Options(94).rank(1)); }),
                       "rank = 1: expected a rank from 0 to world_size - 1 = 0"));
  EXPECT_TRUE(contains(error_of([&] { bload::BlockSampler(lengths, bload::Options(50)); }),
                       "t_max = 50: expected at least the longest sequence (94 steps)"));
  EXPECT_TRUE(contains(error_of([&] { bload::BlockSampler({3, 0, 2}, bload::Options(4)); }),
                       "lengths[1] = 0"));
  EXPECT_TRUE(
      contains(error_of([&] { bload::BlockSampler(lengths, bload::Options(94).policy("tetris")); }),
               "policy = \"tetris\": expected best_fit, random_fill, pad_to_max or lanes"));
  bload::BlockSampler sampler(lengths, bload::Options(94));
  EXPECT_TRUE(
      contains(error_of([&] { sampler.reset(12); }),
               "new_size = 12: expected the number of sequences the sampler was built with"));
  EXPECT_TRUE(contains(error_of([] { bload::read_lengths("/nonexistent/lengths"); }),
                       "/nonexistent/lengths"));
}

// C++ names no policy: every one the core lists is set and read back by its name, and plans,
// so a policy added to the core reaches C++ with no change here (docs/contributing.md).
TEST(BlockSampler, EveryPolicyOfTheCoreIsReachedByName) {
  const auto lengths = action_genome_lengths();
  const auto names = bload::policy_names();
  EXPECT_GE(names.size(), 4u);
  for (const auto& name : names) {
    const auto options = bload::Options(94).blocks_per_batch(4).policy(name);
    EXPECT_EQ(options.policy(), name);
    bload::BlockSampler sampler(lengths, options);
    EXPECT_GT(sampler.batches_per_rank(), 0) << name;
  }
}

}  // namespace

}  // namespace sampler_test
