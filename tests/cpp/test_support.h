// What the C++ tests share: the bundled lengths, a dataset whose values say where they came from,
// a rank's epochs and their coverage, archives as bytes, and checks of the c10::Error a call
// throws.
#pragma once

#include <bload/bload.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <sstream>
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

// Every batch table of one rank's epoch, from a sampler that is reset first.
inline std::vector<at::Tensor> epoch_tables(bload::BlockSampler& sampler) {
  sampler.reset();
  std::vector<at::Tensor> tables;
  while (auto request = sampler.next()) tables.push_back(request->table);
  return tables;
}

// Checks that the pieces of every rank together cover each sequence's steps exactly once.
inline void expect_exactly_once(const std::vector<int64_t>& lengths,
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

inline bool same_tables(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

// The archive a sampler saves, as bytes.
inline std::string saved(const bload::BlockSampler& sampler) {
  torch::serialize::OutputArchive archive;
  sampler.save(archive);
  std::ostringstream bytes;
  archive.save_to(bytes);
  return bytes.str();
}

// Reads `bytes` as an archive (torch's reader, through bload::read_archive), then loads the
// sampler from it.
inline void load(bload::BlockSampler& sampler, const std::string& bytes) {
  torch::serialize::InputArchive archive;
  std::istringstream stream(bytes);
  bload::read_archive(archive, stream);
  sampler.load(archive);
}

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
