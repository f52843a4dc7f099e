// What the C++ tests share: the bundled lengths, a dataset whose values say where they came from,
// and checks of the c10::Error a call throws.
#pragma once

#include <bload/bload.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

namespace bload_test {

inline std::vector<int64_t> action_genome_lengths() {
  return bload::read_lengths(BLOAD_DATA_DIR "/action_genome_like.lengths");
}

// Sequence i has lengths[i] steps; step t of it is the feature pair (1000 i + t, -(1000 i + t))
// with target i, so every packed value says where it came from.
class SyntheticSequences : public torch::data::datasets::Dataset<SyntheticSequences> {
 public:
  explicit SyntheticSequences(std::vector<int64_t> lengths) : lengths_(std::move(lengths)) {}

  torch::data::Example<> get(size_t index) override {
    auto steps = torch::arange(lengths_.at(index), torch::kFloat) + 1000.0 * index;
    return {torch::stack({steps, -steps}, 1),
            torch::full({lengths_[index]}, static_cast<int64_t>(index))};
  }

  std::optional<size_t> size() const override { return lengths_.size(); }

 private:
  std::vector<int64_t> lengths_;
};

// The message of the c10::Error `call` throws; a failure (and "") if it throws none.
inline std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const c10::Error& error) {
    return error.what_without_backtrace();
  }
  ADD_FAILURE() << "expected a c10::Error, none was thrown";
  return "";
}

// For EXPECT_TRUE(contains(error_of(...), "...")): says what the message was where it fails.
inline testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return testing::AssertionSuccess();
  return testing::AssertionFailure() << "message: " << text << "\n  does not contain: " << part;
}

}  // namespace bload_test
