// Inputs that the kernels and the dataset must refuse with a message naming what is wrong (issue
// 26): padding a dtype cannot hold, undefined tensors, a dataset of another size than the lengths,
// and something thrown by a dataset that is not a std::exception.

#include "test_support.h"

namespace bad_inputs_test {
namespace {

using bload_test::contains;
using bload_test::error_of;
using bload_test::SyntheticSequences;

// One sequence of 3 steps in a block of 4: one step of padding.
const auto one_piece = [] { return torch::tensor({0, 0, 3, 0, 0, 3}, torch::kLong).view({1, 6}); };

TEST(Padding, AnIntegerDtypeRefusesAFraction) {
  const auto sequence = torch::arange(3, torch::kLong);
  const auto message = error_of([&] { bload::pack({sequence}, one_piece(), 1, 4, 1.5); });
  EXPECT_TRUE(contains(message, "padding_value = 1.5: expected an integer in ["));
  auto out = torch::empty({1, 4}, torch::kLong);
  EXPECT_TRUE(contains(error_of([&] { bload::pack_into(out, {sequence}, one_piece(), 1e20); }),
                       "padding_value = 1e+20"));
  // Values the dtype holds exactly still pack.
  EXPECT_TRUE(torch::equal(bload::pack({sequence}, one_piece(), 1, 4, -100.0),
                           torch::tensor({0, 1, 2, -100}).view({1, 4})));
}

TEST(Padding, NoSequenceTakesTheDtypeFromOut) {
  // A table of no row (a batch of empty blocks): the padding is checked against out's dtype.
  const auto no_row = one_piece().slice(0, 0, 0);
  auto out = torch::empty({2, 4}, torch::kLong);
  EXPECT_TRUE(contains(error_of([&] { bload::pack_into(out, {}, no_row, 1.5); }),
                       "padding_value = 1.5: expected an integer in ["));
  bload::pack_into(out, {}, no_row, -7);
  EXPECT_TRUE(torch::equal(out, torch::full({2, 4}, -7, torch::kLong)));
  // A table with a row still needs its sequence.
  EXPECT_TRUE(contains(error_of([&] { bload::pack_into(out, {}, one_piece(), 0); }),
                       "sequences: expected 1 tensors, one per table row, got 0"));
}

TEST(Padding, BoolAndNarrowDtypesRefuseWhatTheyCannotHold) {
  const auto flags = torch::ones({3}, torch::kBool);
  EXPECT_TRUE(contains(error_of([&] { bload::pack({flags}, one_piece(), 1, 4, 2); }),
                       "padding_value = 2: expected 0 or 1"));
  EXPECT_TRUE(contains(
      error_of([&] { bload::pack({torch::zeros({3}, torch::kByte)}, one_piece(), 1, 4, -1); }),
      "padding_value = -1: expected an integer in [0, 255]"));
  EXPECT_TRUE(contains(
      error_of([&] { bload::pack({torch::zeros({3}, torch::kHalf)}, one_piece(), 1, 4, 1e6); }),
      "padding_value = 1e+06: expected a value within"));
  // Infinities are values a float holds.
  const auto packed = bload::pack({torch::zeros({3})}, one_piece(), 1, 4, -INFINITY);
  EXPECT_TRUE(std::isinf(packed[0][3].item<float>()));
}

TEST(Padding, TheDatasetNamesItsOption) {
  const std::vector<int64_t> lengths{3, 2};
  bload::BatchRequest request{one_piece(), 1, 4};
  auto targets =
      bload::BlockDataset(SyntheticSequences(lengths), bload::Options(4).target_padding(-100.7));
  EXPECT_TRUE(contains(error_of([&] { targets.get_batch(request); }),
                       "target_padding = -100.7: expected an integer in ["));
  auto huge =
      bload::BlockDataset(SyntheticSequences(lengths), bload::Options(4).target_padding(1e20));
  EXPECT_TRUE(contains(error_of([&] { huge.get_batch(request); }), "target_padding = 1e+20"));
}

TEST(UndefinedTensors, AreNamedAsUndefined) {
  const at::Tensor undefined;
  const auto sequence = torch::arange(3, torch::kLong);
  const std::string expected = "expected a tensor, got an undefined at::Tensor";
  EXPECT_TRUE(
      contains(error_of([&] { bload::pack({sequence}, undefined, 1, 4); }), "table: " + expected));
  const auto two_pieces = torch::tensor({0, 0, 3, 0, 0, 3, 0, 3, 2, 1, 0, 2}).view({2, 6});
  EXPECT_TRUE(contains(error_of([&] { bload::pack({sequence, undefined}, two_pieces, 1, 5); }),
                       "sequences[1]: expected a tensor [steps, ...], got an undefined"));
  EXPECT_TRUE(contains(error_of([&] { bload::unpack(torch::zeros({1, 4}), undefined); }),
                       "table: " + expected));
  EXPECT_TRUE(
      contains(error_of([&] { bload::valid_mask(undefined, 1, 4); }), "table: " + expected));
  EXPECT_TRUE(contains(error_of([&] { bload::cu_seqlens(undefined); }), "table: " + expected));
  EXPECT_TRUE(
      contains(error_of([&] { bload::batch_tables(undefined, 1, 4); }), "table: " + expected));
}

TEST(MetaTensors, HaveNoValuesToRead) {
  const auto meta = one_piece().to(at::kMeta);
  EXPECT_TRUE(contains(error_of([&] { bload::unpack(torch::zeros({1, 4}, at::kMeta), meta); }),
                       "table: a meta tensor has no values"));
}

// A dataset that throws an int for one sequence.
class ThrowsAnInt : public torch::data::datasets::Dataset<ThrowsAnInt> {
 public:
  torch::data::Example<> get(size_t index) override {
    if (index == 1) throw 7;
    return inner_.get(index);
  }
  std::optional<size_t> size() const override { return inner_.size(); }

 private:
  SyntheticSequences inner_{{3, 2}};
};

// A dataset whose items' data are 0-d, or whose targets are undefined.
class ShapelessItems : public torch::data::datasets::Dataset<ShapelessItems> {
 public:
  explicit ShapelessItems(bool scalar_data) : scalar_data_(scalar_data) {}
  torch::data::Example<> get(size_t index) override {
    auto example = inner_.get(index);
    if (scalar_data_) return {torch::tensor(1.0), example.target};
    return {example.data, at::Tensor()};
  }
  std::optional<size_t> size() const override { return inner_.size(); }

 private:
  bool scalar_data_;
  SyntheticSequences inner_{{3, 2}};
};

TEST(BlockDataset, NamesAnItemWithoutSteps) {
  bload::BatchRequest request{one_piece(), 1, 4};
  auto scalars = bload::BlockDataset(ShapelessItems(true), bload::Options(4));
  EXPECT_TRUE(contains(error_of([&] { scalars.get_batch(request); }),
                       "bload::BlockDataset: the data of the batch's first item: expected a "
                       "tensor [steps, ...], got a 0-d tensor"));
  auto undefined = bload::BlockDataset(ShapelessItems(false), bload::Options(4));
  EXPECT_TRUE(contains(error_of([&] { undefined.get_batch(request); }),
                       "the target of the batch's first item: expected a tensor [steps, ...], got "
                       "an undefined tensor"));
}

TEST(BlockDataset, NamesWhatIsNotAStdException) {
  bload::BatchRequest request{torch::tensor({0, 0, 3, 0, 0, 3, 0, 3, 2, 1, 0, 2}).view({2, 6}), 1,
                              5};
  auto dataset = bload::BlockDataset(ThrowsAnInt(), bload::Options(5));
  EXPECT_TRUE(contains(error_of([&] { dataset.get_batch(request); }),
                       "not a std::exception while reading sequence 1"));
}

TEST(BlockDataset, RefusesADatasetOfAnotherSize) {
  const std::vector<int64_t> lengths{3, 2, 4, 1};
  auto sampler = bload::BlockSampler(lengths, bload::Options(9));
  auto request = *sampler.next();
  EXPECT_EQ(request.sequences, 4);
  auto shorter = bload::BlockDataset(SyntheticSequences({3, 2, 4}), bload::Options(9));
  EXPECT_TRUE(contains(error_of([&] { shorter.get_batch(request); }),
                       "dataset has 3 sequences: expected 4, the lengths the sampler plans with"));
}

}  // namespace

}  // namespace bad_inputs_test
