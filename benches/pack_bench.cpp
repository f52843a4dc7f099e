// `make bench`'s packing rows (BENCHMARKS.md, "Packing"): bload's pack, pack_into and
// BlockDataset::get_batch, each timed beside its reference in the same run (interleaved rounds,
// median per call), on batches planned from the bundled lengths. One intra-op thread, as the
// issue's table: the figures are per core.
//
//   build/benches/pack_bench examples/data

#include <bload/bload.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

constexpr int kRounds = 7;

// Median over kRounds of the mean time of one call (us), rounds of `a` and `b` interleaved so
// that both see the same machine.
std::pair<double, double> side_by_side(const std::function<void()>& a,
                                       const std::function<void()>& b, int calls) {
  auto per_call = [calls](const std::function<void()>& work) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) work();
    const std::chrono::duration<double, std::micro> spent =
        std::chrono::steady_clock::now() - start;
    return spent.count() / calls;
  };
  a(), b();  // warm caches and allocators
  std::vector<double> times_a, times_b;
  for (int round = 0; round < kRounds; ++round) {
    times_a.push_back(per_call(a));
    times_b.push_back(per_call(b));
  }
  auto median = [](std::vector<double> times) {
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  };
  return {median(times_a), median(times_b)};
}

void print_row(const std::string& what, double bload_us, const std::string& reference,
               double reference_us, double bytes) {
  std::printf("%-46s %10.1f %7.2f  %-34s %10.1f %6.2fx\n", what.c_str(), bload_us,
              bytes / bload_us / 1e3, reference.c_str(), reference_us, bload_us / reference_us);
}

// A rank's first batch of `blocks` blocks for `lengths`, with random whole sequences of
// `features` values a step (none when features is 0: [T]) and the same steps as pieces.
struct Batch {
  bload::BatchRequest request;
  std::vector<at::Tensor> sequences, pieces;
  double bytes = 0;
};

Batch first_batch(const std::vector<int64_t>& lengths, int64_t t_max, int64_t blocks,
                  int64_t features, at::ScalarType dtype) {
  const auto options = bload::Options(t_max).blocks_per_batch(blocks).split_oversized(true);
  Batch batch{*bload::BlockSampler(lengths, options).next(), {}, {}};
  auto cells = batch.request.table.accessor<int64_t, 2>();
  for (int64_t row = 0; row < batch.request.table.size(0); ++row) {
    std::vector<int64_t> shape{cells[row][bload::kSequenceLength]};
    if (features > 0) shape.push_back(features);
    auto sequence =
        dtype == at::kLong ? torch::randint(50000, shape, at::kLong) : torch::randn(shape, dtype);
    batch.sequences.push_back(sequence);
    batch.pieces.push_back(
        sequence.narrow(0, cells[row][bload::kOffset], cells[row][bload::kLength]));
  }
  const int64_t step_bytes = std::max<int64_t>(features, 1) * c10::elementSize(dtype);
  batch.bytes = static_cast<double>(blocks * t_max * step_bytes);
  return batch;
}

void pack_rows(const std::string& name, const Batch& batch, int calls) {
  const auto& table = batch.request.table;
  const int64_t blocks = batch.request.blocks, t_max = batch.request.t_max;
  const auto label = name + " (" + std::to_string(table.size(0)) + " pieces)";
  auto [pack_us, cat_us] =
      side_by_side([&] { bload::pack(batch.sequences, table, blocks, t_max, 0); },
                   [&] { at::cat(batch.pieces); }, calls);
  print_row("pack " + label, pack_us, "torch.cat of the pieces", cat_us, batch.bytes);

  // Into a reused buffer, against the same bytes copied into a preallocated one.
  auto out = bload::pack(batch.sequences, table, blocks, t_max, 0);
  auto source = out.clone(), destination = torch::empty_like(out);
  auto [into_us, copy_us] = side_by_side(
      [&] { bload::pack_into(out, batch.sequences, table, 0); },
      [&] { std::memcpy(destination.data_ptr(), source.data_ptr(), source.nbytes()); }, calls);
  print_row("pack_into reused buffer " + label, into_us, "memcpy of the batch's bytes", copy_us,
            batch.bytes);
}

// Pieces of one step, so that the time is the per-piece overhead: 4,096 pieces in 16 blocks.
void per_piece_row() {
  const std::vector<int64_t> lengths(4096, 1);
  auto batch = first_batch(lengths, 256, 16, 1, at::kFloat);
  auto out = bload::pack(batch.sequences, batch.request.table, 16, 256, 0);
  auto [pieces_us, tables_us] =
      side_by_side([&] { bload::pack_into(out, batch.sequences, batch.request.table, 0); },
                   [&] { bload::valid_mask(batch.request.table, 16, 256); }, 50);
  const double pieces = static_cast<double>(batch.request.table.size(0));
  std::printf("%-46s %10.1f  (%.0f ns a piece; valid_mask of the same table: %.1f us)\n",
              "pack_into, 4096 pieces of 1 step", pieces_us, pieces_us * 1e3 / pieces, tables_us);
}

// Sequences held in memory; `get` hands out the stored tensors (no copy), so get_batch's time is
// bload's work.
class InMemory : public torch::data::datasets::Dataset<InMemory> {
 public:
  // As many sequences as the lengths planned (get_batch checks the dataset's size); only the
  // batch's are read.
  explicit InMemory(const Batch& batch)
      : data_(static_cast<size_t>(batch.request.sequences)),
        target_(static_cast<size_t>(batch.request.sequences)) {
    auto cells = batch.request.table.accessor<int64_t, 2>();
    for (size_t row = 0; row < batch.sequences.size(); ++row) {
      const auto index = static_cast<size_t>(cells[row][bload::kSequence]);
      data_[index] = batch.sequences[row];
      target_[index] = torch::zeros({batch.sequences[row].size(0)}, at::kLong);
    }
  }
  torch::data::Example<> get(size_t index) override { return {data_[index], target_[index]}; }
  std::optional<size_t> size() const override { return data_.size(); }

 private:
  std::vector<at::Tensor> data_, target_;
};

void get_batch_row(const Batch& batch) {
  const auto& table = batch.request.table;
  const int64_t blocks = batch.request.blocks, t_max = batch.request.t_max;
  auto dataset = bload::BlockDataset(InMemory(batch), bload::Options(t_max));
  auto [get_us, pack_us] =
      side_by_side([&] { dataset.get_batch(batch.request); },
                   [&] { bload::pack(batch.sequences, table, blocks, t_max, 0); }, 200);
  print_row("BlockDataset::get_batch 8 x 94 x 16", get_us, "bload::pack of its data alone", pack_us,
            batch.bytes);
}

// Steps a dataset returns, whole sequences or ranges, counted over `batches` batches.
template <bool kRanges>
class Counting : public torch::data::datasets::Dataset<Counting<kRanges>> {
 public:
  explicit Counting(const std::vector<int64_t>& lengths) : lengths_(&lengths) {}
  torch::data::Example<> get(size_t index) override {
    steps += (*lengths_)[index];
    return {torch::empty({(*lengths_)[index], 1}), torch::empty({(*lengths_)[index]}, at::kLong)};
  }
  torch::data::Example<> get_range(size_t, int64_t, int64_t length)
    requires kRanges
  {
    steps += length;
    return {torch::empty({length, 1}), torch::empty({length}, at::kLong)};
  }
  std::optional<size_t> size() const override { return lengths_->size(); }
  int64_t steps = 0;

 private:
  const std::vector<int64_t>* lengths_;
};

void loaded_steps_row(const std::vector<int64_t>& lengths) {
  const auto options = bload::Options(1024).blocks_per_batch(16).split_oversized(true);
  auto whole = bload::BlockDataset(Counting<false>(lengths), options);
  auto ranges = bload::BlockDataset(Counting<true>(lengths), options);
  bload::BlockSampler sampler(lengths, options);
  int64_t packed = 0;
  for (int batch = 0; batch < 2000; ++batch) {
    auto request = sampler.next();
    if (!request) break;
    whole.get_batch(*request);
    packed += ranges.get_batch(*request).valid.sum().item<int64_t>();
  }
  std::printf(
      "steps loaded per step packed, text_like t_max 1024 split, 2,000 batches of 16: "
      "whole sequences %.2f, get_range %.2f\n",
      static_cast<double>(whole.inner().steps) / packed,
      static_cast<double>(ranges.inner().steps) / packed);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DATA_DIR (examples/data)\n", argv[0]);
    return 2;
  }
  at::set_num_threads(1);
  const std::string data = argv[1];
  const auto speech = bload::read_lengths(data + "/speech_like.lengths");
  const auto text = bload::read_lengths(data + "/text_like.lengths");
  const auto video = bload::read_lengths(data + "/action_genome_like.lengths");
  std::printf("%-46s %10s %7s  %-34s %10s %7s\n", "bload (median us a call, 7 rounds)", "us",
              "GB/s", "reference", "us", "ratio");
  pack_rows("speech 64 x 2048 x 80 f32", first_batch(speech, 2048, 64, 80, at::kFloat), 5);
  pack_rows("tokens 16 x 4096 int64", first_batch(text, 4096, 16, 0, at::kLong), 50);
  pack_rows("video 8 x 94 x 2048 f32", first_batch(video, 94, 8, 2048, at::kFloat), 50);
  per_piece_row();
  get_batch_row(first_batch(video, 94, 8, 16, at::kFloat));
  loaded_steps_row(text);
}
