// The packed batch as the core declares it: C++'s PackedBatch has the core's fields, batch_tables
// writes what each per-table operator writes, and LaneState keeps, hands out and checkpoints
// every lane's state.

#include "test_support.h"

#include <ATen/core/dispatch/Dispatcher.h>

namespace batch_test {
namespace {

using bload_test::contains;
using bload_test::error_of;
using bload_test::SyntheticSequences;

// Rows 0 and 1 are lanes 2 and 3 (rank 1 of 2, 2 rows a rank): lane 2 goes on with steps 3..4 of
// sequence 0, then starts sequence 1; lane 3 starts sequence 2.
bload::BatchRequest lanes_request() {
  return {torch::tensor({0, 0, 2, 0, 3, 5, 0, 2, 2, 1, 0, 2, 1, 0, 4, 2, 0, 9}, torch::kLong)
              .view({3, 6}),
          2, 4, /*carry=*/true, /*first_lane=*/2};
}

bload::PackedBatch lanes_batch() {
  return bload::BlockDataset(SyntheticSequences({5, 2, 9}), bload::Options(4))
      .get_batch(lanes_request());
}

TEST(PackedBatch, HasTheCoresFields) {
  const auto& op = c10::Dispatcher::singleton().findSchemaOrThrow("bload::batch_fields", "");
  torch::jit::Stack stack;
  op.callBoxed(&stack);
  // Tensors and host integers (shape "int") are declared in lists of their own, each in the
  // core's order.
  std::vector<std::string> tensors, host_ints;
  const auto names = stack[0].toListRef();
  const auto shapes = stack[2].toListRef();
  for (size_t i = 0; i < names.size(); ++i) {
    (shapes[i].toStringRef() == "int" ? host_ints : tensors).push_back(names[i].toStringRef());
  }
  EXPECT_EQ(bload::PackedBatch::field_names(), tensors);
  EXPECT_EQ(bload::PackedBatch::host_int_names(), host_ints);
  bload::PackedBatch batch;
  EXPECT_TRUE(
      contains(error_of([&] { batch.field("masks"); }), "bload::PackedBatch has no field 'masks'"));
}

TEST(BatchTables, EqualThePerTableOperators) {
  const auto request = lanes_request();
  const auto& table = request.table;
  for (bool carry : {false, true}) {
    const auto tables = bload::batch_tables(table, 2, 4, carry, 2);
    ASSERT_EQ(tables.size(), 13u);
    EXPECT_TRUE(torch::equal(tables[0], bload::reset_mask(table, 2, 4, carry)));
    EXPECT_TRUE(torch::equal(tables[1], bload::valid_mask(table, 2, 4)));
    EXPECT_TRUE(torch::equal(tables[2], bload::end_mask(table, 2, 4)));
    EXPECT_TRUE(torch::equal(
        tables[3], carry ? bload::carry_mask(table, 2, 4) : torch::zeros({2}, torch::kBool)));
    EXPECT_TRUE(torch::equal(tables[4], torch::tensor({2, 3}, torch::kLong)));
    EXPECT_TRUE(torch::equal(tables[5], bload::segment_ids(table, 2, 4)));
    EXPECT_TRUE(torch::equal(tables[6], bload::position_ids(table, 2, 4)));
    EXPECT_TRUE(torch::equal(tables[7], bload::cu_seqlens(table)));
    EXPECT_TRUE(torch::equal(tables[8], table.select(1, bload::kSequence)));
  }
  EXPECT_TRUE(contains(error_of([&] { bload::batch_tables(table, 2, 4, false, -1); }),
                       "first_lane = -1: expected from 0 to"));
}

// The attention views of a batch follow its documents: position_ids from 0 at each piece when
// asked, the dense mask equal to the one document_ids define, kv-block tiles of its shape, and
// max_seqlen on the packed batch.
TEST(Attention, MasksFollowTheDocuments) {
  const auto request = lanes_request();
  const auto& table = request.table;
  const auto tables = bload::batch_tables(table, 2, 4, false, 2, "piece");
  EXPECT_TRUE(torch::equal(tables[6], torch::tensor({0, 1, 0, 1, 0, 1, 2, 3}).view({2, 4})));
  const auto ids = tables[11];  // document_ids
  EXPECT_TRUE(torch::equal(ids, torch::tensor({0, 0, 1, 1, 2, 2, 2, 2}, torch::kInt).view({2, 4})));
  for (bool causal : {false, true}) {
    auto expected = ids.unsqueeze(2) == ids.unsqueeze(1);
    if (causal) expected = expected & torch::ones({4, 4}, torch::kBool).tril();
    EXPECT_TRUE(torch::equal(bload::attention_mask(table, 2, 4, causal), expected));
  }
  const auto tiles = bload::kv_blocks(table, 2, 4, 3, true);
  ASSERT_EQ(tiles.size(), 4u);
  EXPECT_EQ(tiles[1].sizes(), (std::vector<int64_t>{2, 1, 2, 2}));
  EXPECT_TRUE(contains(error_of([&] { bload::kv_blocks(table, 2, 4, 0, true); }),
                       "block_size = 0: expected at least 1 step"));
  EXPECT_TRUE(contains(error_of([&] { bload::batch_tables(table, 2, 4, false, 0, "token"); }),
                       "positions = \"token\": expected"));
  const auto batch =
      bload::BlockDataset(SyntheticSequences({5, 2, 9}), bload::Options(4).positions("piece"))
          .get_batch(request);
  EXPECT_EQ(batch.max_seqlen, 4);
  EXPECT_EQ(bload::max_seqlen(table, 2, 4), 4);
  EXPECT_TRUE(torch::equal(batch.position_ids, tables[6]));
}

TEST(LaneState, CarriesEachLanesStateAndResumesInOtherFactors) {
  const std::vector<int64_t> lengths{5, 2, 9, 4, 4, 7};
  const auto lanes = bload::Options(4).world_size(2).rank(1).blocks_per_batch(2).policy("lanes");
  bload::BlockSampler sampler(lengths, lanes);
  bload::LaneState state(sampler, {3});
  const auto batch = lanes_batch();
  // Nothing kept yet: every row starts from zero.
  EXPECT_TRUE(torch::equal(state.initial(batch), torch::zeros({2, 3})));
  const auto final_state = torch::arange(6, torch::kFloat).view({2, 3});
  state.update(batch, final_state);
  // Row 0 (lane 2) carries its state; row 1 (lane 3) starts a sequence from zero.
  auto expected = final_state.clone();
  expected[1].zero_();
  EXPECT_TRUE(torch::equal(state.initial(batch), expected));

  // Rank 0 holds lanes 0 and 1: gathered in rank order, then taken back as 1 rank of 4 rows.
  const auto every_lane = state.gathered(
      [](const at::Tensor& mine) { return torch::cat({torch::full({2, 3}, -1.0), mine}); });
  EXPECT_EQ(every_lane.sizes(), (std::vector<int64_t>{4, 3}));
  bload::BlockSampler one_rank(lengths, bload::Options(4).blocks_per_batch(4).policy("lanes"));
  bload::LaneState resumed(one_rank, {3});
  resumed.load(every_lane);
  EXPECT_TRUE(torch::equal(resumed.rows(), every_lane));

  bload::BlockSampler other(lengths, bload::Options(4).blocks_per_batch(3).policy("lanes"));
  bload::LaneState three(other, {3});
  EXPECT_TRUE(contains(error_of([&] { three.load(every_lane); }),
                       "expected 3 lanes (world_size * blocks_per_batch)"));
  bload::LaneState wide(one_rank, {5});
  EXPECT_TRUE(contains(error_of([&] { wide.load(every_lane); }), "expected [4, 5]"));
  // A batch of another rank's lanes.
  bload::LaneState rank_zero(bload::BlockSampler(lengths, bload::Options(lanes).rank(0)), {3});
  EXPECT_TRUE(contains(error_of([&] { rank_zero.initial(batch); }),
                       "a batch of lanes 2 to 3: expected this rank's lanes 0 to 1"));
}

}  // namespace

}  // namespace batch_test
