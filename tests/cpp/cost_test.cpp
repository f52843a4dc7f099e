// Options::cost: blocks dealt to ranks by cost (docs/cost_balance.md). Parsed by the core, part of
// the DDP agreement and of the sampler's archive, reported in PlanStats.

#include "test_support.h"

namespace cost_test {
namespace {

using bload_test::action_genome_lengths;
using bload_test::contains;
using bload_test::epoch_tables;
using bload_test::error_of;
using bload_test::expect_exactly_once;

bload::Options split(int64_t world_size) {
  return bload::Options(40).split_oversized(true).world_size(world_size);
}

TEST(Cost, DefaultsToStepsAndTakesTheCoresNames) {
  EXPECT_EQ(bload::Options(94).cost(), "steps");
  EXPECT_EQ(bload::Options(94).cost("attention:4096").cost(), "attention:4096");
  for (const std::string bad : {"flops", "attention", "attention:-1", "attention:4294967297"}) {
    const auto message = error_of([&] { bload::Options(94).cost(bad); });
    EXPECT_TRUE(contains(message, "cost = \"" + bad + "\": expected \"steps\" or \"attention:A\""));
  }
  // Lanes keep their rows all epoch: refused by the planner, naming the cost.
  const auto lanes = bload::Options(94).policy("lanes").cost("attention:1");
  const auto message = error_of([&] { bload::Planner(action_genome_lengths(), lanes); });
  EXPECT_TRUE(
      contains(message, "cost = \"attention:1\": expected \"steps\" with the lanes policy"));
}

TEST(Cost, EveryRankGetsTheSameBatchesAndEveryStepOnce) {
  const auto lengths = action_genome_lengths();
  std::vector<std::vector<at::Tensor>> per_rank;
  for (int64_t rank = 0; rank < 4; ++rank) {
    bload::BlockSampler sampler(lengths, split(4).cost("attention:1").rank(rank));
    per_rank.push_back(epoch_tables(sampler));
    EXPECT_EQ(per_rank.back().size(), per_rank.front().size());
  }
  expect_exactly_once(lengths, per_rank);
}

TEST(Cost, StatsReportTheImbalanceAndDealingByCostLowersIt) {
  const auto lengths = action_genome_lengths();
  const auto by_steps = bload::Planner(lengths, split(4)).plan(0).stats();
  const auto by_cost = bload::Planner(lengths, split(4).cost("attention:1")).plan(0).stats();
  EXPECT_EQ(by_cost.blocks, by_steps.blocks);
  EXPECT_GE(by_cost.rank_cost_imbalance_mean, 1.0);
  EXPECT_GE(by_cost.rank_cost_imbalance_worst, by_cost.rank_cost_imbalance_mean);
  EXPECT_GE(by_steps.rank_cost_imbalance_mean, 1.0);
}

TEST(Cost, RanksDealingByAnotherCostDisagreeByName) {
  const std::vector<int64_t> lengths{5, 9, 3, 7, 2, 8, 6, 4};
  const auto options = bload::Options(10).world_size(2);
  const std::vector<bload::Planner> ranks{
      bload::Planner(lengths, options),
      bload::Planner(lengths, bload::Options(options).cost("attention:64"))};
  std::vector<at::Tensor> rows;
  for (const auto& planner : ranks)
    rows.push_back(bload::agreement_values(planner.plan(0), planner));
  const auto message =
      error_of([&] { bload::check_agreement(at::stack(rows), ranks[0].plan(0), ranks[0]); });
  EXPECT_TRUE(
      contains(message, "ranks disagree on cost: rank 0 has steps, rank 1 has attention:64"));
}

TEST(Cost, AnArchiveOfAnotherCostIsRefusedNamingTheCost) {
  const auto lengths = action_genome_lengths();
  bload::BlockSampler saver(lengths, split(2).cost("attention:8"));
  saver.reset();
  saver.next();
  bload::BlockSampler same(lengths, split(2).cost("attention:8"));
  EXPECT_NO_THROW(bload_test::load(same, bload_test::saved(saver)));
  bload::BlockSampler other(lengths, split(2));
  const auto message = error_of([&] { bload_test::load(other, bload_test::saved(saver)); });
  EXPECT_TRUE(contains(message, "cost"));
  EXPECT_TRUE(contains(message, "\"attention:8\": expected \"steps\""));
}

}  // namespace

// Options::max_pieces: the cap on a block's pieces, checked by the core, kept by every packing
// policy, part of the agreement (its own field) like every option.
TEST(MaxPieces, EveryBlockKeepsToTheCapAndBadCapsAreNamed) {
  EXPECT_EQ(bload::Options(94).max_pieces(), -1);
  const auto lengths = action_genome_lengths();
  for (const std::string policy : {"best_fit", "random_fill"}) {
    std::vector<std::vector<at::Tensor>> per_rank;
    for (int64_t rank = 0; rank < 2; ++rank) {
      bload::BlockSampler sampler(lengths, split(2).policy(policy).max_pieces(2).rank(rank));
      per_rank.push_back(epoch_tables(sampler));
      for (const auto& table : per_rank.back()) {
        const auto pieces = at::bincount(table.select(1, bload::kBlock));
        EXPECT_LE(pieces.max().item<int64_t>(), 2) << policy;
      }
    }
    expect_exactly_once(lengths, per_rank);
  }
  for (const int64_t bad : {int64_t{0}, int64_t{-2}, int64_t{1} << 40}) {
    const auto message =
        error_of([&] { bload::Planner(lengths, bload::Options(94).max_pieces(bad)); });
    EXPECT_TRUE(contains(message, "max_pieces = " + std::to_string(bad) + ": expected")) << message;
  }
  const auto lanes = bload::Options(94).policy("lanes").max_pieces(2);
  const auto message = error_of([&] { bload::Planner(lengths, lanes); });
  EXPECT_TRUE(contains(message, "max_pieces = 2: expected no cap with the lanes policy"));
}

}  // namespace cost_test
