// Plans shared on a node from C++ (docs/shared_plans.md): a BlockSampler with shared_plan_dir
// serves the batches of a private one from the file its local rank 0 writes, a rank without the
// lengths reads its planner from the file, and a damaged file is refused by name.

#include "test_support.h"

#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace {

using bload_test::action_genome_lengths;
using bload_test::contains;
using bload_test::epoch_tables;
using bload_test::error_of;
using bload_test::same_tables;

std::string fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("bload-cpp-shared-" + name + "-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

bload::Options options(int64_t rank) {
  return bload::Options(94).world_size(3).blocks_per_batch(2).seed(5).rank(rank);
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
