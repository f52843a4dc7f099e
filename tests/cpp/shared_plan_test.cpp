// Plans shared on a node from C++ (docs/shared_plans.md): a BlockSampler with shared_plan_dir
// serves the batches of a private one from the file its local rank 0 writes, keeping no lengths
// of its own once it serves (writer and readers, made from the lengths), a resumed epoch too; a
// rank without the lengths reads its planner from the file, and a damaged file is refused by
// name.

#include "test_support.h"

#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace shared_plan_test {
namespace {

using bload_test::action_genome_lengths;
using bload_test::contains;
using bload_test::epoch_tables;
using bload_test::error_of;
using bload_test::same_tables;

// This process's directories, removed when it ends, passed or failed.
struct RemovedAtExit {
  std::filesystem::path root;
  ~RemovedAtExit() {
    std::error_code ignored;
    std::filesystem::remove_all(root, ignored);
  }
};
const RemovedAtExit shared_dirs{std::filesystem::temp_directory_path() /
                                ("bload-cpp-shared-" + std::to_string(getpid()))};

std::string fresh_dir(const std::string& name) {
  const auto dir = shared_dirs.root / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// A reader waits for its writer at most 20 s: a test that fails does not hang.
bload::Options options(int64_t rank) {
  return bload::Options(94)
      .world_size(3)
      .blocks_per_batch(2)
      .seed(5)
      .rank(rank)
      .shared_plan_timeout(20.0);
}

TEST(SharedPlan, EveryRankServesThePrivatePlansBatches) {
  const auto lengths = action_genome_lengths();
  const auto dir = fresh_dir("same");
  for (int64_t rank = 0; rank < 3; ++rank) {
    SCOPED_TRACE("rank = " + std::to_string(rank));
    bload::BlockSampler shared(lengths, options(rank).shared_plan_dir(dir).local_rank(rank));
    bload::BlockSampler own(lengths, options(rank));
    EXPECT_TRUE(same_tables(epoch_tables(shared), epoch_tables(own)));
    EXPECT_TRUE(same_tables(epoch_tables(shared), epoch_tables(own)));  // epoch 1
  }
  const auto planner = bload::Planner::from_shared_plan(options(0), 0, dir, 10.0);
  const auto mapped = planner.map_shared_plan(0, dir, 10.0);
  const auto own = bload::Planner(lengths, options(0)).plan(0);
  EXPECT_TRUE(mapped.shared());
  EXPECT_EQ(mapped.private_bytes(), 0);
  EXPECT_GE(own.private_bytes(), 4 * static_cast<int64_t>(lengths.size()));
  EXPECT_EQ(mapped.hash(), own.hash());
  EXPECT_EQ(planner.lengths_hash(), bload::Planner(lengths, options(0)).lengths_hash());
  EXPECT_LT(planner.private_bytes(), static_cast<int64_t>(lengths.size()));
}

TEST(SharedPlan, SamplersMadeFromLengthsKeepNoLengthsOnceTheyServe) {
  const auto lengths = action_genome_lengths();
  const auto sequences = static_cast<int64_t>(lengths.size());
  const auto dir = fresh_dir("lean");
  // The writer (local rank 0) and a reader, both made from the lengths, and a private sampler.
  bload::BlockSampler writer(lengths, options(0).shared_plan_dir(dir).local_rank(0));
  bload::BlockSampler reader(lengths, options(1).shared_plan_dir(dir).local_rank(1));
  bload::BlockSampler own(lengths, options(0));
  EXPECT_GE(writer.planner().private_bytes(), 4 * sequences);  // before its first epoch
  for (int epoch = 0; epoch < 3; ++epoch) {
    SCOPED_TRACE("epoch = " + std::to_string(epoch));
    EXPECT_TRUE(same_tables(epoch_tables(writer), epoch_tables(own)));
    epoch_tables(reader);
    for (auto* sampler : {&writer, &reader}) {
      EXPECT_TRUE(sampler->plan().shared());
      // The planner's per-length tables alone: at most a byte a sequence.
      EXPECT_LE(sampler->planner().private_bytes() + sampler->plan().private_bytes(), sequences);
      EXPECT_EQ(sampler->planner().lengths_hash(), own.planner().lengths_hash());
    }
  }
}

TEST(SharedPlan, AResumedEpochIsServedFromTheFile) {
  const auto lengths = action_genome_lengths();
  const auto dir = fresh_dir("resume");
  // Saved on 3 ranks part-way into epoch 1; loaded on 3 ranks and on 2 (the rest re-dealt).
  bload::BlockSampler saved(lengths, options(0));
  epoch_tables(saved);
  saved.reset();
  saved.next();
  saved.next();
  const auto state = saved.state_dict();
  for (int64_t world : {3, 2}) {
    SCOPED_TRACE("world_size = " + std::to_string(world));
    auto on = [&](int64_t rank) { return options(rank).world_size(world); };
    bload::BlockSampler writer(lengths, on(0).shared_plan_dir(dir).local_rank(0));
    bload::BlockSampler reader(lengths, on(1).shared_plan_dir(dir).local_rank(1));
    bload::BlockSampler own0(lengths, on(0)), own1(lengths, on(1));
    for (auto* sampler : {&writer, &reader, &own0, &own1}) sampler->load_state_dict(state);
    EXPECT_TRUE(writer.plan().shared() && reader.plan().shared() && !own0.plan().shared());
    EXPECT_EQ(writer.plan().hash(), own0.plan().hash());
    EXPECT_EQ(writer.position(), own0.position());
    EXPECT_LE(reader.planner().private_bytes(), static_cast<int64_t>(lengths.size()));
    EXPECT_TRUE(same_tables(epoch_tables(writer), epoch_tables(own0)));
    EXPECT_TRUE(same_tables(epoch_tables(reader), epoch_tables(own1)));
    // The next epoch is shared again, from the lengths mapped from the resumed plan's file.
    EXPECT_TRUE(same_tables(epoch_tables(writer), epoch_tables(own0)));
    EXPECT_TRUE(same_tables(epoch_tables(reader), epoch_tables(own1)));
  }
}

TEST(SharedPlan, ANegativeLocalRankOrAnEndlessTimeoutIsRefusedByName) {
  const auto lengths = action_genome_lengths();
  const auto dir = fresh_dir("bad-options");
  const bload::Planner planner(lengths, options(0).shared_plan_dir(dir).local_rank(-1));
  EXPECT_TRUE(contains(error_of([&] { planner.plan_for_node(0); }),
                       "local_rank = -1: expected the rank's number on its node, at least 0"));
  for (const double timeout : {1e19, 1e300}) {
    EXPECT_TRUE(contains(error_of([&] { planner.map_shared_plan(0, dir, timeout); }),
                         "expected a finite number of seconds, from 0 to 31536000"));
  }
}

TEST(SharedPlan, ADamagedFileIsRefusedByName) {
  const auto lengths = action_genome_lengths();
  const auto dir = fresh_dir("damaged");
  const bload::Planner planner(lengths, options(0));
  const auto path = planner.write_shared_plan(0, dir);
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    const auto middle = static_cast<std::streamoff>(std::filesystem::file_size(path) / 2);
    file.seekg(middle);
    const char byte = static_cast<char>(file.get());
    file.seekp(middle);
    file.put(static_cast<char>(byte ^ 1));
  }
  const auto message = error_of([&] { planner.map_shared_plan(0, dir, 10.0); });
  EXPECT_TRUE(contains(message, "shared plan file " + path + " (checksum of the"));
  const auto missing = error_of([&] { planner.map_shared_plan(1, dir, 0.05); });
  EXPECT_TRUE(contains(missing, "(missing) = no such file"));
}

}  // namespace

}  // namespace shared_plan_test
