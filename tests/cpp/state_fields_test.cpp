// state_in and state_out, the lanes policy's carried state per piece: their values on a table
// worked out by hand, batch_tables' outputs against the core's declaration (eager and meta), and
// LaneState's per-piece gather and scatter.

#include "test_support.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <map>

namespace state_fields_test {
namespace {

using bload_test::contains;
using bload_test::error_of;
using bload_test::SyntheticSequences;

// A lanes batch of 4 rows of 4 steps (rank 0 of 1):
// row 0: steps 2..5 of sequence 0 (9 steps): continued from the previous batch, cut at the end;
// row 1: step 3 of sequence 1 (4 steps), continued, ending mid-row; then sequence 2 whole (3
//        steps), ending exactly at the row's end;
// row 2: padding only;
// row 3: sequence 3 whole (2 steps), then steps 0..1 of sequence 4 (5 steps), cut at the end.
const std::vector<int64_t> kLengths{9, 4, 3, 2, 5};

at::Tensor lanes_table() {
  return torch::tensor({0, 0, 4, 0, 2, 9,  //
                        1, 0, 1, 1, 3, 4,  //
                        1, 1, 3, 2, 0, 3,  //
                        3, 0, 2, 3, 0, 2,  //
                        3, 2, 2, 4, 0, 5},
                       torch::kLong)
      .view({5, 6});
}

bload::PackedBatch lanes_batch(bool carry) {
  return bload::BlockDataset(SyntheticSequences(kLengths), bload::Options(4))
      .get_batch({lanes_table(), 4, 4, carry, /*first_lane=*/0});
}

at::Tensor longs(std::vector<int64_t> values) { return torch::tensor(values, torch::kLong); }

TEST(StateFields, SayWhichPieceReadsAndWhichGivesEachLanesState) {
  const auto batch = lanes_batch(true);
  EXPECT_TRUE(torch::equal(batch.cu_seqlens, torch::tensor({0, 4, 5, 8, 10, 12}, torch::kInt)));
  // The continued pieces (rows 0 and 1) read their rows' lane states; the others start at zero.
  EXPECT_TRUE(torch::equal(batch.state_in, longs({0, 1, -1, -1, -1})));
  // Row 0's piece and row 3's last piece go on next batch; row 1's sequence ends exactly at the
  // row's end and row 2 is padding: nothing reads their lanes' states again.
  EXPECT_TRUE(torch::equal(batch.state_out, longs({0, -1, -1, 4})));
  const auto packed = lanes_batch(false);  // no carried state: nothing carries
  EXPECT_TRUE(torch::equal(packed.state_in, torch::full({5}, -1, torch::kLong)));
  EXPECT_TRUE(torch::equal(packed.state_out, torch::full({4}, -1, torch::kLong)));
}

TEST(BatchTables, FollowTheCoresDeclaration) {
  const auto& op = c10::Dispatcher::singleton().findSchemaOrThrow("bload::batch_fields", "");
  torch::jit::Stack stack;
  op.callBoxed(&stack);
  const auto names = stack[0].toListRef(), dtypes = stack[1].toListRef();
  const auto shapes = stack[2].toListRef(), from_table = stack[3].toListRef();
  const std::map<std::string, at::ScalarType> dtype_of{
      {"bool", at::kBool}, {"int32", at::kInt}, {"int64", at::kLong}};
  const std::map<std::string, std::vector<int64_t>> dims_of{{"[blocks, t_max]", {4, 4}},
                                                            {"[blocks]", {4}},
                                                            {"[pieces]", {5}},
                                                            {"[pieces + 1]", {6}},
                                                            {"[2 * pieces + blocks + 1]", {15}}};
  const auto table = lanes_table();
  for (const auto& device : {at::Device(at::kCPU), at::Device(at::kMeta)}) {
    const auto tables = bload::batch_tables(table.to(device), 4, 4, true, 0);
    size_t output = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      if (!from_table[i].toBool()) continue;
      const auto name = names[i].toStringRef();
      ASSERT_LT(output, tables.size()) << name;
      EXPECT_EQ(tables[output].scalar_type(), dtype_of.at(dtypes[i].toStringRef())) << name;
      EXPECT_EQ(tables[output].sizes(), c10::IntArrayRef(dims_of.at(shapes[i].toStringRef())))
          << name << " on " << device;
      ++output;
    }
    EXPECT_EQ(output, tables.size());
  }
}

TEST(LaneState, GathersByStateInAndScattersByStateOut) {
  bload::BlockSampler sampler(kLengths, bload::Options(4).blocks_per_batch(4).policy("lanes"));
  bload::LaneState lanes(sampler, {2}, torch::kDouble);
  const auto batch = lanes_batch(true);
  auto kept = torch::arange(1, 9, torch::kDouble).view({4, 2});
  lanes.load(kept);
  EXPECT_TRUE(
      torch::equal(lanes.initial_pieces(batch),
                   torch::tensor({1, 2, 3, 4, 0, 0, 0, 0, 0, 0}, torch::kDouble).view({5, 2})));
  const auto final_states = -torch::arange(10, torch::kDouble).view({5, 2});
  lanes.update_pieces(batch, final_states.clone().requires_grad_());
  // Row 0 takes piece 0's final state, row 3 piece 4's; rows 1 and 2 keep theirs.
  EXPECT_TRUE(torch::equal(
      lanes.rows(), torch::tensor({0, -1, 3, 4, 5, 6, -8, -9}, torch::kDouble).view({4, 2})));
  EXPECT_FALSE(lanes.rows().requires_grad());
  EXPECT_TRUE(contains(error_of([&] { lanes.update_pieces(batch, final_states.narrow(0, 0, 4)); }),
                       "final_states has shape [4, 2]: expected [5, 2], a state per piece"));
}

}  // namespace

}  // namespace state_fields_test
