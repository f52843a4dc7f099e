// bload::BlockSampler: the DDP contract (equal batch counts, every step once), epochs, the epoch
// handle, save/load and resuming, and the errors of bad arguments and archives.

#include "test_support.h"

#include <algorithm>
#include <sstream>

namespace {

using bload_test::action_genome_lengths;
using bload_test::contains;
using bload_test::error_of;
using bload_test::SyntheticSequences;

// Every batch table of one rank's epoch, from a sampler that is reset first.
std::vector<at::Tensor> epoch_tables(bload::BlockSampler& sampler) {
  sampler.reset();
  std::vector<at::Tensor> tables;
  while (auto request = sampler.next()) tables.push_back(request->table);
  return tables;
}

// Checks that the pieces of every rank together cover each sequence's steps exactly once.
void expect_exactly_once(const std::vector<int64_t>& lengths,
                         const std::vector<std::vector<at::Tensor>>& tables_per_rank) {
  std::vector<std::vector<std::pair<int64_t, int64_t>>> pieces(lengths.size());
  for (const auto& tables : tables_per_rank) {
    for (const auto& table : tables) {
      auto cells = table.accessor<int64_t, 2>();
      for (int64_t row = 0; row < table.size(0); ++row) {
        pieces.at(cells[row][bload::kSequence])
            .emplace_back(cells[row][bload::kOffset], cells[row][bload::kLength]);
      }
    }
  }
  for (size_t sequence = 0; sequence < lengths.size(); ++sequence) {
    auto& own = pieces[sequence];
    std::sort(own.begin(), own.end());
    int64_t covered = 0;
    for (const auto& [offset, length] : own) {
      EXPECT_EQ(offset, covered) << "sequence " << sequence;
      covered += length;
    }
    EXPECT_EQ(covered, lengths[sequence]) << "sequence " << sequence;
  }
}

bool same_tables(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

std::string saved(const bload::BlockSampler& sampler) {
  torch::serialize::OutputArchive archive;
  sampler.save(archive);
  std::ostringstream bytes;
  archive.save_to(bytes);
  return bytes.str();
}

void load(bload::BlockSampler& sampler, const std::string& bytes) {
  torch::serialize::InputArchive archive;
  std::istringstream stream(bytes);
  archive.load_from(stream);
  sampler.load(archive);
}

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
  auto loader = torch::data::make_data_loader(
      bload::BlockDataset(SyntheticSequences(lengths), options), sampler,
      torch::data::DataLoaderOptions());
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

TEST(BlockSampler, ResumesMidEpochAfterLoad) {
  const auto lengths = action_genome_lengths();
  const auto options = bload::Options(94).world_size(3).rank(2).blocks_per_batch(2);
  bload::BlockSampler original(lengths, options);
  epoch_tables(original);  // epoch 0
  original.reset();        // epoch 1
  for (int i = 0; i < 17; ++i) original.next();
  const auto bytes = saved(original);

  bload::BlockSampler resumed(lengths, options);
  load(resumed, bytes);
  EXPECT_EQ(resumed.epoch(), 1);
  EXPECT_EQ(resumed.position(), 17);
  resumed.reset();  // as a DataLoader does before iterating: resumes, does not advance
  while (auto expected = original.next()) {
    auto got = resumed.next();
    ASSERT_TRUE(got.has_value());
    EXPECT_TRUE(torch::equal(got->table, expected->table));
  }
  EXPECT_FALSE(resumed.next().has_value());
  EXPECT_TRUE(same_tables(epoch_tables(resumed), epoch_tables(original)));  // epoch 2 on both
}

TEST(BlockSampler, ResumesThroughADataLoader) {
  const auto lengths = action_genome_lengths();
  const auto options = bload::Options(94).blocks_per_batch(16);
  bload::BlockSampler original(lengths, options);
  original.reset();
  for (int i = 0; i < 5; ++i) original.next();
  bload::BlockSampler resumed(lengths, options);
  load(resumed, saved(original));

  auto loader = torch::data::make_data_loader(
      bload::BlockDataset(SyntheticSequences(lengths), options), std::move(resumed),
      torch::data::DataLoaderOptions());
  std::vector<at::Tensor> rest_of_epoch;
  for (auto& batch : *loader) rest_of_epoch.push_back(batch.table);
  std::vector<at::Tensor> expected;
  while (auto request = original.next()) expected.push_back(request->table);
  EXPECT_FALSE(expected.empty());
  EXPECT_TRUE(same_tables(rest_of_epoch, expected));
}

TEST(BlockSampler, LoadRejectsOtherLengthsOptionsAndBadArchives) {
  const auto lengths = action_genome_lengths();
  const auto options = bload::Options(94).world_size(2);
  bload::BlockSampler source(lengths, options);
  source.next();
  const auto bytes = saved(source);

  bload::BlockSampler other_world(lengths, bload::Options(94).world_size(3));
  EXPECT_TRUE(contains(error_of([&] { load(other_world, bytes); }),
                       "world_size = 2 in the archive: expected 3"));
  auto changed = lengths;
  changed[10] += 1;
  bload::BlockSampler other_lengths(changed, options);
  EXPECT_TRUE(contains(error_of([&] { load(other_lengths, bytes); }), "lengths_hash = "));
  bload::BlockSampler other_seed(lengths, bload::Options(options).seed(5));
  EXPECT_TRUE(contains(error_of([&] { load(other_seed, bytes); }),
                       "seed = 0 in the archive: expected 5"));

  // An archive that holds something else.
  torch::serialize::OutputArchive foreign;
  foreign.write("weights", torch::ones({3}));
  std::ostringstream foreign_bytes;
  foreign.save_to(foreign_bytes);
  bload::BlockSampler target(lengths, options);
  EXPECT_TRUE(contains(error_of([&] { load(target, foreign_bytes.str()); }),
                       "the archive has no 'bload_sampler.version'"));
  // Bytes cut short are not an archive at all.
  EXPECT_FALSE(error_of([&] { load(target, bytes.substr(0, bytes.size() / 2)); }).empty());
  // A failed load leaves the sampler as it was.
  EXPECT_EQ(target.epoch(), -1);
  EXPECT_TRUE(target.next().has_value());
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
               "policy = \"tetris\": expected best_fit, random_fill or pad_to_max"));
  bload::BlockSampler sampler(lengths, bload::Options(94));
  EXPECT_TRUE(
      contains(error_of([&] { sampler.reset(12); }),
               "new_size = 12: expected the number of sequences the sampler was built with"));
  EXPECT_TRUE(contains(error_of([] { bload::read_lengths("/nonexistent/lengths"); }),
                       "/nonexistent/lengths"));
}

}  // namespace
