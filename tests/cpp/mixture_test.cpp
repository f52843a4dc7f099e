// Mixtures of sources from C++ (docs/mixtures.md): bload::Planner(sources, options) gives each
// source its weight's share of the steps, maps sequences back to their sources, and a sampler's
// state of another mixture is refused by name.

#include "test_support.h"

#include <cmath>

namespace mixture_test {
namespace {

using bload_test::contains;
using bload_test::error_of;

std::vector<bload::Source> sources(double web_weight, double code_weight) {
  std::vector<int64_t> web, code;
  for (int64_t i = 0; i < 200; ++i) web.push_back(1 + (i * 7) % 40);
  for (int64_t i = 0; i < 20; ++i) code.push_back(10 + (i * 3) % 30);
  return {{"web", web, web_weight}, {"code", code, code_weight}};
}

bload::Options options() { return bload::Options(50).world_size(2).blocks_per_batch(2).seed(3); }

TEST(Mixture, SourcesGiveTheirSharesWithinOneSequence) {
  const auto all = sources(0.6, 0.4);
  bload::Planner planner(all, options());
  int64_t total = 0;
  for (const auto& source : all) {
    for (auto length : source.lengths) total += length;
  }
  const auto stats = planner.source_stats(1);
  ASSERT_EQ(stats.size(), 2u);
  for (size_t s = 0; s < stats.size(); ++s) {
    const auto target = static_cast<int64_t>(std::llround(total * stats[s].weight_share));
    const auto longest = *std::max_element(all[s].lengths.begin(), all[s].lengths.end());
    EXPECT_GE(stats[s].steps, target) << stats[s].name;
    EXPECT_LT(stats[s].steps, target + longest) << stats[s].name;
  }
  EXPECT_EQ(stats[0].name, "web");
  EXPECT_GT(stats[1].repeats, 0);  // 20 sequences of code are far below 40% of the steps
  EXPECT_GT(stats[0].left_out, 0);
  // Every step of the plan is a chosen one: the plan's steps are the sources'.
  EXPECT_EQ(static_cast<int64_t>(planner.plan(1).stats().steps), stats[0].steps + stats[1].steps);
  EXPECT_EQ(planner.source_of(205), std::make_pair(int64_t{1}, int64_t{5}));
  EXPECT_EQ(planner.source_starts(), (std::vector<int64_t>{0, 200, 220}));
  EXPECT_TRUE(planner.is_mixture());
  EXPECT_FALSE(bload::Planner(all[0].lengths, options()).is_mixture());
}

TEST(Mixture, PlansAreDeterministicAndDifferAcrossEpochs) {
  bload::Planner one(sources(0.6, 0.4), options()), other(sources(0.6, 0.4), options());
  EXPECT_EQ(one.plan(2).hash(), other.plan(2).hash());
  EXPECT_NE(one.plan(2).hash(), one.plan(3).hash());
  EXPECT_NE(one.mixture_hash(), bload::Planner(sources(0.5, 0.5), options()).mixture_hash());
}

TEST(Mixture, AStateOfAnotherMixtureIsRefusedByName) {
  bload::BlockSampler sampler(bload::Planner(sources(0.6, 0.4), options()), 0);
  sampler.reset();
  sampler.next();
  const auto state = sampler.state_dict();
  bload::BlockSampler same(bload::Planner(sources(0.6, 0.4), options()), 0);
  EXPECT_NO_THROW(same.load_state_dict(state));
  EXPECT_EQ(same.next()->table.equal(sampler.next()->table), true);
  bload::BlockSampler other(bload::Planner(sources(0.5, 0.5), options()), 0);
  const auto message = error_of([&] { other.load_state_dict(state); });
  EXPECT_TRUE(contains(message, "state['mixture'] = \"\\\"web\\\" weight 0.6")) << message;
}

TEST(Mixture, RanksOfAnotherMixtureDisagreeOnItsHash) {
  bload::Planner mine(sources(0.6, 0.4), options()), theirs(sources(0.5, 0.5), options());
  const auto rows = at::stack({bload::agreement_values(mine.plan(0), mine),
                               bload::agreement_values(theirs.plan(0), theirs)});
  const auto message = error_of([&] { bload::check_agreement(rows, mine.plan(0), mine); });
  EXPECT_TRUE(contains(message, "ranks disagree on mixture_hash: rank 0 has 0x")) << message;
}

TEST(Mixture, BadSourcesAreNamed) {
  auto bad = sources(0.6, 0.4);
  bad[1].weight = 0;
  EXPECT_TRUE(contains(error_of([&] { bload::Planner(bad, options()); }),
                       "sources[1].weight = 0: expected a finite number above 0"));
  bad = sources(0.6, std::nan(""));
  EXPECT_TRUE(
      contains(error_of([&] { bload::Planner(bad, options()); }), "sources[1].weight = NaN"));
  bad = sources(0.6, 0.4);
  bad[0].lengths.clear();
  EXPECT_TRUE(contains(error_of([&] { bload::Planner(bad, options()); }),
                       "sources[0].lengths = an empty list"));
  EXPECT_TRUE(contains(error_of([&] { bload::Planner(std::vector<bload::Source>{}, options()); }),
                       "sources = an empty list"));
  bad = sources(0.6, 0.4);
  bad[1].lengths[3] = -4;
  EXPECT_TRUE(
      contains(error_of([&] { bload::Planner(bad, options()); }), "sources[1].lengths[3] = -4"));
}

}  // namespace

}  // namespace mixture_test
