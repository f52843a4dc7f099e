// bload::SequenceStore: a store written here byte by byte (the layout of docs/data.md, which
// Python's bload.store.write writes) read back whole and by ranges, packed by BlockDataset as an
// in-memory dataset of the same sequences packs, and refused when damaged or truncated while
// mapped, with an error naming the file. tests/python/test_store.py checks Python's side.

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bload/dataset.h"
#include "bload/sampler.h"
#include "bload/sequence_store.h"

namespace store_test {
namespace {

namespace fs = std::filesystem;

static_assert(bload::ReadsRanges<bload::SequenceStore>);

// zlib's CRC-32, bit by bit: the reference the core's table-driven one must agree with.
uint32_t crc32(const std::string& bytes) {
  uint32_t crc = ~0u;
  for (unsigned char byte : bytes) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1) ? (crc >> 1) ^ 0xedb88320u : crc >> 1;
  }
  return ~crc;
}

template <typename T>
std::string bytes_of(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A store of `lengths`: data float32 [T, 2] with step s of sequence i = (i, s), target int64 [T]
// = 100 * i + s.
// This process's stores, removed when it ends, passed or failed.
struct RemovedAtExit {
  fs::path root;
  ~RemovedAtExit() {
    std::error_code ignored;
    fs::remove_all(root, ignored);
  }
};
const RemovedAtExit stores{fs::temp_directory_path() /
                           ("bload_store_test_" + std::to_string(getpid()))};

fs::path write_store(const std::string& name, const std::vector<int64_t>& lengths) {
  const auto dir = stores.root / name;
  fs::create_directories(dir);
  std::vector<int64_t> offsets{0};
  std::vector<float> data;
  std::vector<int64_t> target;
  for (size_t i = 0; i < lengths.size(); ++i) {
    offsets.push_back(offsets.back() + lengths[i]);
    for (int64_t s = 0; s < lengths[i]; ++s) {
      data.insert(data.end(), {static_cast<float>(i), static_cast<float>(s)});
      target.push_back(100 * static_cast<int64_t>(i) + s);
    }
  }
  write_file(dir / "offsets.bin", bytes_of(offsets));
  write_file(dir / "data.bin", bytes_of(data));
  write_file(dir / "target.bin", bytes_of(target));
  write_file(
      dir / "header.json",
      R"({"format": "bload-sequence-store", "version": 1, "count": )" +
          std::to_string(lengths.size()) + R"(, "steps": )" + std::to_string(offsets.back()) +
          R"(, "offsets_crc32": )" + std::to_string(crc32(bytes_of(offsets))) +
          R"(, "fields": [{"name": "data", "dtype": "float32", "shape": [2], "file": "data.bin"},
                    {"name": "target", "dtype": "int64", "shape": [], "file": "target.bin"}]})");
  return dir;
}

// The same sequences in memory, read whole.
class InMemory : public torch::data::datasets::Dataset<InMemory> {
 public:
  explicit InMemory(bload::SequenceStore store) : store_(std::move(store)) {}
  torch::data::Example<> get(size_t index) override {
    auto example = store_.get(index);
    return {example.data.clone(), example.target.clone()};
  }
  std::optional<size_t> size() const override { return store_.size(); }

 private:
  bload::SequenceStore store_;
};

std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const c10::Error& error) {
    return error.what();
  }
  return "no error";
}

TEST(SequenceStore, ReadsWholeSequencesAndRangesOfTheMapping) {
  const std::vector<int64_t> lengths{3, 1, 6, 2};
  bload::SequenceStore store(write_store("round_trip", lengths).string());
  EXPECT_EQ(store.size(), 4u);
  const auto read = store.lengths();
  EXPECT_EQ(std::vector<int64_t>(read.data_ptr<int64_t>(), read.data_ptr<int64_t>() + 4), lengths);
  auto whole = store.get(2);
  ASSERT_EQ(whole.data.sizes(), (std::vector<int64_t>{6, 2}));
  EXPECT_EQ(whole.data[5][1].item<float>(), 5.0f);
  EXPECT_EQ(whole.target[4].item<int64_t>(), 204);
  auto part = store.get_range(2, 3, 2);
  EXPECT_TRUE(torch::equal(part.data, whole.data.narrow(0, 3, 2)));
  EXPECT_EQ(part.data.data_ptr(), whole.data[3].data_ptr());  // views of one mapping
  EXPECT_NE(error_of([&] { store.get_range(2, 5, 2); }).find("a range within its 6 steps"),
            std::string::npos);
  EXPECT_NE(error_of([&] { store.get(4); }).find("index = 4"), std::string::npos);
}

TEST(SequenceStore, PacksAsTheSameSequencesInMemory) {
  const std::vector<int64_t> lengths{30, 7, 12, 45, 3, 9, 20};
  const auto dir = write_store("packs", lengths).string();
  const auto options = bload::Options(8).blocks_per_batch(3).split_oversized(true);
  auto sampler = bload::BlockSampler(lengths, options);
  auto from_store = bload::BlockDataset(bload::SequenceStore(dir), options);
  auto in_memory = bload::BlockDataset(InMemory(bload::SequenceStore(dir)), options);
  int64_t packed = 0;
  while (auto request = sampler.next()) {
    auto a = from_store.get_batch(*request);
    auto b = in_memory.get_batch(*request);
    EXPECT_TRUE(torch::equal(a.data, b.data));
    EXPECT_TRUE(torch::equal(a.target, b.target));
    packed += a.valid.sum().item<int64_t>();
  }
  EXPECT_EQ(packed, 126);
}

TEST(SequenceStore, ABadStoreNamesItsFile) {
  const auto dir = write_store("damaged", {3, 4});
  std::fstream offsets(dir / "offsets.bin", std::ios::in | std::ios::out | std::ios::binary);
  offsets.seekp(8);
  offsets.put(4);  // offsets 0, 4, 7: another CRC-32
  offsets.close();
  const auto message = error_of([&] { bload::SequenceStore store(dir.string()); });
  EXPECT_NE(message.find((dir / "offsets.bin").string() + " = offsets of CRC-32"),
            std::string::npos)
      << message;
  const auto other = write_store("fields", {3});
  EXPECT_NE(error_of([&] {
              bload::SequenceStore(other.string(), "features");
            }).find("store field = features: expected one of the store's (data, target)"),
            std::string::npos);
}

TEST(SequenceStore, AFileTruncatedWhileMappedIsAnErrorNotASigbus) {
  const std::vector<int64_t> lengths(4, 50000);
  const auto dir = write_store("truncated", lengths);
  bload::SequenceStore store(dir.string());
  EXPECT_EQ(store.get_range(3, 49990, 10).target[9].item<int64_t>(), 300 + 49999);
  fs::resize_file(dir / "data.bin", 4096);
  const auto message = error_of([&] { store.get_range(3, 49990, 10); });
  EXPECT_NE(message.find((dir / "data.bin").string() + " = a file of 4096 bytes"),
            std::string::npos)
      << message;
}

}  // namespace

}  // namespace store_test
