// bload::check_agreement on gathered fingerprints: ranks that plan the same epoch pass, and any
// difference is an error naming the field and every rank's value (the multi-process runs of the
// trainers, in tests/python/test_ddp_faults.py, check the all-gather itself).

#include "test_support.h"

namespace agreement_test {
namespace {

using bload_test::contains;
using bload_test::error_of;

const std::vector<int64_t> kLengths{5, 9, 3, 7, 2, 8, 6, 4};

bload::Options base() { return bload::Options(10).world_size(2).blocks_per_batch(1); }

// Every rank's fingerprint of `epoch`, one planner per rank, as an all-gather would stack them.
at::Tensor gathered(const std::vector<bload::Planner>& ranks, int64_t epoch) {
  std::vector<at::Tensor> rows;
  for (const auto& planner : ranks)
    rows.push_back(bload::agreement_values(planner.plan(epoch), planner));
  return at::stack(rows);
}

std::string disagreement(const std::vector<bload::Planner>& ranks, int64_t epoch = 0) {
  const auto& mine = ranks.front();
  return error_of([&] { bload::check_agreement(gathered(ranks, epoch), mine.plan(epoch), mine); });
}

TEST(Agreement, FieldsAreTheLengthsEveryOptionTheEpochAndThePlanHash) {
  bload::Planner planner(kLengths, base());
  std::vector<std::string> names;
  for (const auto& field : bload::agreement_fields(planner.plan(3), planner))
    names.push_back(field.name);
  std::vector<std::string> expected{"sequences", "lengths_hash", "mixture_hash"};
  for (const auto& [name, value] : bload::plan_options_by_name(base())) expected.push_back(name);
  expected.insert(expected.end(), {"epoch", "plan_hash", "rank"});
  EXPECT_EQ(names, expected);
  const auto values = bload::agreement_values(planner.plan(3), planner, 1);
  EXPECT_EQ(values.scalar_type(), at::kLong);
  EXPECT_EQ(values[0].item<int64_t>(), 8);
  EXPECT_EQ(values[-3].item<int64_t>(), 3);
  EXPECT_EQ(static_cast<uint64_t>(values[-2].item<int64_t>()), planner.plan(3).hash());
  EXPECT_EQ(values[-1].item<int64_t>(), 1);
  // Not said: -1.
  EXPECT_EQ(bload::agreement_values(planner.plan(3), planner)[-1].item<int64_t>(), -1);
}

// Each process's row, as an all-gather stacks them, serving `served[row]`.
at::Tensor serving(const bload::Planner& planner, const std::vector<int64_t>& served) {
  std::vector<at::Tensor> rows;
  for (const int64_t rank : served)
    rows.push_back(bload::agreement_values(planner.plan(0), planner, rank));
  return at::stack(rows);
}

TEST(Agreement, TwoProcessesServingOneRankAreNamed) {
  // As when each node's processes pass their LOCAL_RANK as the rank: every other field alike,
  // and half of the sequences never trained.
  bload::Planner planner(kLengths, base().world_size(4));
  const auto check = [&](const std::vector<int64_t>& served) {
    return error_of(
        [&] { bload::check_agreement(serving(planner, served), planner.plan(0), planner); });
  };
  EXPECT_TRUE(contains(check({0, 1, 0, 1}),
                       "ranks disagree on rank: processes 0, 2 all serve rank 0; processes 1, 3 "
                       "all serve rank 1 (each process must serve its own rank"));
  const auto passes = [&](const std::vector<int64_t>& served) {
    bload::check_agreement(serving(planner, served), planner.plan(0), planner);
  };
  EXPECT_NO_THROW(passes({3, 1, 0, 2}));    // any order: every rank served once
  EXPECT_NO_THROW(passes({0, -1, -1, 3}));  // where not said, not checked
  EXPECT_TRUE(contains(check({2, -1, 2, -1}), "processes 0, 2 all serve rank 2"));
  // A rank outside the world, from a row no planner here made.
  auto rows = serving(planner, {0, 1, 2, 3});
  rows[3][-1] = 9;
  EXPECT_TRUE(contains(
      error_of([&] { bload::check_agreement(rows, planner.plan(0), planner); }),
      "gathered: row 3 serves rank 9: expected a rank from 0 to 3, or -1 when it is not said"));
  EXPECT_TRUE(contains(error_of([&] { bload::agreement_values(planner.plan(0), planner, 4); }),
                       "rank = 4: expected the rank this process serves, from 0 to world_size - "
                       "1 = 3, or -1 when it is not said"));
}

TEST(Agreement, RanksPlanningTheSameEpochPass) {
  bload::Planner planner(kLengths, base().world_size(3));
  const std::vector<bload::Planner> ranks{planner, bload::Planner(kLengths, base().world_size(3)),
                                          planner};
  EXPECT_NO_THROW(bload::check_agreement(gathered(ranks, 2), planner.plan(2), planner));
}

TEST(Agreement, ADifferentSeedIsNamedWithEveryRanksValue) {
  const auto message =
      disagreement({bload::Planner(kLengths, base()), bload::Planner(kLengths, base().seed(1))});
  EXPECT_TRUE(contains(message, "ranks disagree on seed: rank 0 has 0, rank 1 has 1"));
  // The plan's hash follows from the seed: not named as a cause of its own.
  EXPECT_FALSE(contains(message, "plan_hash"));
}

TEST(Agreement, RanksHoldingTheSameValueAreGrouped) {
  const auto three = base().world_size(3);
  const auto message = disagreement({bload::Planner(kLengths, three),
                                     bload::Planner(kLengths, bload::Options(three).t_max(12)),
                                     bload::Planner(kLengths, three)});
  EXPECT_TRUE(contains(message, "ranks disagree on t_max: ranks 0, 2 have 10, rank 1 has 12"));
}

TEST(Agreement, PoliciesByNameLengthsByCountAndHash) {
  auto shorter = kLengths;
  shorter.pop_back();
  const auto message = disagreement(
      {bload::Planner(kLengths, base()), bload::Planner(shorter, base().policy("pad_to_max"))});
  EXPECT_TRUE(contains(message, "ranks disagree on sequences: rank 0 has 8, rank 1 has 7"));
  EXPECT_TRUE(contains(message, "ranks disagree on lengths_hash: rank 0 has 0x"));
  EXPECT_TRUE(
      contains(message, "ranks disagree on policy: rank 0 has best_fit, rank 1 has pad_to_max"));
}

TEST(Agreement, EpochsDiffer) {
  bload::Planner planner(kLengths, base());
  auto rows = at::stack({bload::agreement_values(planner.plan(0), planner),
                         bload::agreement_values(planner.plan(1), planner)});
  const auto message = error_of([&] { bload::check_agreement(rows, planner.plan(0), planner); });
  EXPECT_TRUE(contains(message, "ranks disagree on epoch: rank 0 has 0, rank 1 has 1"));
}

TEST(Agreement, APlanHashAloneIsNamedAsSuch) {
  bload::Planner planner(kLengths, base());
  auto rows = gathered({planner, planner}, 0);
  rows[1][-2] = 12345;  // as from a rank whose core plans differently from the same inputs
  const auto message = error_of([&] { bload::check_agreement(rows, planner.plan(0), planner); });
  EXPECT_TRUE(contains(message, "ranks disagree on plan_hash although they agree on its inputs"));
  EXPECT_TRUE(contains(message, "rank 1 has 0x0000000000003039"));
}

TEST(Agreement, AMalformedGatherIsAnErrorNamingIt) {
  bload::Planner planner(kLengths, base());
  const auto plan = planner.plan(0);
  EXPECT_TRUE(contains(
      error_of([&] { bload::check_agreement(at::zeros({2, 10}), plan, planner); }),
      "gathered: expected an int64 tensor [ranks, 14] of every rank's agreement_values, got a "
      "Float tensor [2, 10]"));
  EXPECT_TRUE(contains(
      error_of([&] { bload::check_agreement(at::zeros({2, 3}, at::kLong), plan, planner); }),
      "got a Long tensor [2, 3]"));
  EXPECT_TRUE(contains(
      error_of([&] { bload::check_agreement(at::zeros({0, 10}, at::kLong), plan, planner); }),
      "[ranks, 14]"));
  EXPECT_TRUE(contains(error_of([&] {
                         bload::check_agreement(at::zeros({2, 14}, at::kLong).to(at::kMeta), plan,
                                                planner);
                       }),
                       "gathered: a meta tensor has no values"));
}

TEST(Agreement, RowsThatLeaveOutThisRankAreRefused) {
  bload::Planner planner(kLengths, base());
  bload::Planner other(kLengths, base().seed(7));
  EXPECT_TRUE(contains(
      error_of([&] { bload::check_agreement(gathered({planner}, 0), planner.plan(0), planner); }),
      "gathered: 1 rows: expected one row per rank, world_size = 2"));
  EXPECT_TRUE(contains(error_of([&] {
                         bload::check_agreement(gathered({other, other}, 0), planner.plan(0),
                                                planner);
                       }),
                       "gathered: every row has seed = 7: expected 0 as this rank plans it"));
  EXPECT_TRUE(contains(error_of([&] {
                         bload::check_agreement(gathered({planner, planner}, 1), planner.plan(0),
                                                planner);
                       }),
                       "gathered: every row has epoch = 1: expected 0"));
}

}  // namespace

}  // namespace agreement_test
