// C++ tests of libbload: one executable, one ctest case per function (`bload_tests <case>`).

#include <bload/bload.h>
#include "packed_gru.h"  // examples/cpp: the DDP trainer's model
#include <torch/torch.h>

#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>

namespace {

#define EXPECT(condition)                                                                  \
  do {                                                                                     \
    if (!(condition))                                                                      \
      throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                               ": expected " #condition);                                  \
  } while (false)

// The message of the c10::Error `call` throws; a failure if it throws none.
std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const c10::Error& error) {
    return error.what_without_backtrace();
  }
  throw std::runtime_error("expected a c10::Error, none was thrown");
}

bool contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return true;
  std::cerr << "message: " << text << "\n  does not contain: " << part << "\n";
  return false;
}

std::vector<int64_t> action_genome_lengths() {
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
std::vector<at::Tensor> epoch_tables(bload::BlockSampler& sampler) {
  sampler.reset();
  std::vector<at::Tensor> tables;
  while (auto request = sampler.next()) tables.push_back(request->table);
  return tables;
}

// Checks that the pieces of every rank together cover each sequence's steps exactly once.
void expect_exactly_once(const std::vector<int64_t>& lengths,
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
      EXPECT(offset == covered);
      covered += length;
    }
    EXPECT(covered == lengths[sequence]);
  }
}

void sampler_ranks_get_equal_batches_and_every_step_once() {
  const auto lengths = action_genome_lengths();
  for (int64_t world_size : {1, 2, 3, 8}) {
    std::vector<std::vector<at::Tensor>> per_rank;
    for (int64_t rank = 0; rank < world_size; ++rank) {
      bload::BlockSampler sampler(
          lengths, bload::Options(94).world_size(world_size).rank(rank).blocks_per_batch(4));
      per_rank.push_back(epoch_tables(sampler));
      EXPECT(per_rank.back().size() == per_rank.front().size());
      EXPECT(static_cast<int64_t>(per_rank.back().size()) == sampler.batches_per_rank());
    }
    EXPECT(!per_rank.front().empty());
    expect_exactly_once(lengths, per_rank);
  }
}

void sampler_split_sequences_are_covered_once() {
  const auto lengths = bload::read_lengths(BLOAD_DATA_DIR "/speech_like.lengths");
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  const auto options = bload::Options(longest / 3).world_size(2).split_oversized(true);
  std::vector<std::vector<at::Tensor>> per_rank;
  for (int64_t rank = 0; rank < 2; ++rank) {
    bload::BlockSampler sampler(lengths, bload::Options(options).rank(rank));
    per_rank.push_back(epoch_tables(sampler));
  }
  EXPECT(per_rank[0].size() == per_rank[1].size());
  expect_exactly_once(lengths, per_rank);
  const auto stats = bload::Planner(lengths, options).plan(0).stats();
  EXPECT(stats.split_sequences > 0);
}

bool same_tables(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

void sampler_epochs_advance_on_reset_and_differ() {
  const auto lengths = action_genome_lengths();
  bload::BlockSampler sampler(lengths, bload::Options(94).world_size(2).rank(1));
  EXPECT(sampler.epoch() == -1);
  auto first = epoch_tables(sampler);
  EXPECT(sampler.epoch() == 0);
  auto second = epoch_tables(sampler);
  EXPECT(sampler.epoch() == 1);
  EXPECT(!same_tables(first, second));
  // A sampler built again replays the same epochs: plans depend on (lengths, options, epoch).
  bload::BlockSampler again(lengths, bload::Options(94).world_size(2).rank(1));
  EXPECT(same_tables(epoch_tables(again), first));
  EXPECT(same_tables(epoch_tables(again), second));
}

void sampler_epoch_handle_reaches_the_loader_copy() {
  const auto lengths = action_genome_lengths();
  const auto options = bload::Options(94).blocks_per_batch(8);
  bload::BlockSampler sampler(lengths, options);
  auto handle = sampler.epoch_handle();
  auto loader = torch::data::make_data_loader(
      bload::BlockDataset(SyntheticSequences(lengths), options), sampler,
      torch::data::DataLoaderOptions());
  auto tables_of_next_epoch = [&] {
    std::vector<at::Tensor> tables;
    for (auto& batch : *loader) tables.push_back(batch.table.table);
    return tables;
  };
  auto epoch0 = tables_of_next_epoch();
  EXPECT(handle.epoch() == 0);
  auto epoch1 = tables_of_next_epoch();
  EXPECT(handle.epoch() == 1);
  EXPECT(!same_tables(epoch0, epoch1));
  handle.set_epoch(7);
  auto epoch7 = tables_of_next_epoch();
  EXPECT(handle.epoch() == 7);
  // The caller's own sampler was never reset: the loader iterated its copy.
  EXPECT(sampler.epoch() == -1);
  const auto plan = bload::Planner(lengths, options).plan(7);
  EXPECT(static_cast<int64_t>(epoch7.size()) == plan.batches_per_rank());
  for (int64_t b = 0; b < plan.batches_per_rank(); ++b)
    EXPECT(torch::equal(epoch7[b], plan.batch(0, b).table));
  EXPECT(handle.epoch() == 7);
  tables_of_next_epoch();
  EXPECT(handle.epoch() == 8);
}

std::string saved(const bload::BlockSampler& sampler) {
  torch::serialize::OutputArchive archive;
  sampler.save(archive);
  std::ostringstream bytes;
  archive.save_to(bytes);
  return bytes.str();
}

void load(bload::BlockSampler& sampler, const std::string& bytes) {
  torch::serialize::InputArchive archive;
  std::istringstream stream(bytes);
  archive.load_from(stream);
  sampler.load(archive);
}

void sampler_resumes_mid_epoch_after_load() {
  const auto lengths = action_genome_lengths();
  const auto options = bload::Options(94).world_size(3).rank(2).blocks_per_batch(2);
  bload::BlockSampler original(lengths, options);
  epoch_tables(original);  // epoch 0
  original.reset();        // epoch 1
  for (int i = 0; i < 17; ++i) original.next();
  const auto bytes = saved(original);

  bload::BlockSampler resumed(lengths, options);
  load(resumed, bytes);
  EXPECT(resumed.epoch() == 1 && resumed.position() == 17);
  resumed.reset();  // as a DataLoader does before iterating: resumes, does not advance
  while (auto expected = original.next()) {
    auto got = resumed.next();
    EXPECT(got && torch::equal(got->table, expected->table));
  }
  EXPECT(!resumed.next());
  EXPECT(same_tables(epoch_tables(resumed), epoch_tables(original)));  // epoch 2 on both
}

void sampler_resumes_through_a_data_loader() {
  const auto lengths = action_genome_lengths();
  const auto options = bload::Options(94).blocks_per_batch(16);
  bload::BlockSampler original(lengths, options);
  original.reset();
  for (int i = 0; i < 5; ++i) original.next();
  bload::BlockSampler resumed(lengths, options);
  load(resumed, saved(original));

  auto loader = torch::data::make_data_loader(
      bload::BlockDataset(SyntheticSequences(lengths), options), std::move(resumed),
      torch::data::DataLoaderOptions());
  std::vector<at::Tensor> rest_of_epoch;
  for (auto& batch : *loader) rest_of_epoch.push_back(batch.table.table);
  std::vector<at::Tensor> expected;
  while (auto request = original.next()) expected.push_back(request->table);
  EXPECT(!expected.empty() && same_tables(rest_of_epoch, expected));
}

void sampler_load_rejects_other_lengths_options_and_bad_archives() {
  const auto lengths = action_genome_lengths();
  const auto options = bload::Options(94).world_size(2);
  bload::BlockSampler source(lengths, options);
  source.next();
  const auto bytes = saved(source);

  bload::BlockSampler other_world(lengths, bload::Options(94).world_size(3));
  EXPECT(contains(error_of([&] { load(other_world, bytes); }),
                  "world_size = 2 in the archive: expected 3"));
  auto changed = lengths;
  changed[10] += 1;
  bload::BlockSampler other_lengths(changed, options);
  EXPECT(contains(error_of([&] { load(other_lengths, bytes); }), "lengths_hash = "));
  bload::BlockSampler other_seed(lengths, bload::Options(options).seed(5));
  EXPECT(contains(error_of([&] { load(other_seed, bytes); }), "seed = 0 in the archive: expected 5"));

  // An archive that holds something else.
  torch::serialize::OutputArchive foreign;
  foreign.write("weights", torch::ones({3}));
  std::ostringstream foreign_bytes;
  foreign.save_to(foreign_bytes);
  bload::BlockSampler target(lengths, options);
  EXPECT(contains(error_of([&] { load(target, foreign_bytes.str()); }),
                  "the archive has no 'bload_sampler.version'"));
  // Bytes cut short are not an archive at all.
  EXPECT(!error_of([&] { load(target, bytes.substr(0, bytes.size() / 2)); }).empty());
  // A failed load leaves the sampler as it was.
  EXPECT(target.epoch() == -1 && target.next().has_value());
}

void sampler_rejects_bad_arguments() {
  const auto lengths = action_genome_lengths();
  EXPECT(contains(error_of([&] { bload::BlockSampler(lengths, bload::Options(94).rank(1)); }),
                  "rank = 1: expected a rank from 0 to world_size - 1 = 0"));
  EXPECT(contains(error_of([&] { bload::BlockSampler(lengths, bload::Options(50)); }),
                  "t_max = 50: expected at least the longest sequence (94 steps)"));
  EXPECT(contains(
      error_of([&] { bload::BlockSampler({3, 0, 2}, bload::Options(4)); }), "lengths[1] = 0"));
  EXPECT(contains(error_of([&] { bload::BlockSampler(lengths, bload::Options(94).policy("tetris")); }),
                  "policy = \"tetris\": expected best_fit, random_fill or pad_to_max"));
  bload::BlockSampler sampler(lengths, bload::Options(94));
  EXPECT(contains(error_of([&] { sampler.reset(12); }),
                  "new_size = 12: expected the number of sequences the sampler was built with"));
  EXPECT(contains(error_of([] { bload::read_lengths("/nonexistent/lengths"); }),
                  "/nonexistent/lengths"));
}

void dataset_packs_a_hand_computed_batch() {
  // Block 0: sequence 0 (3 steps), sequence 1 (2 steps), 1 step of padding.
  // Block 1: steps 2..5 of sequence 2 (6 steps, split), 2 steps of padding.
  const std::vector<int64_t> lengths{3, 2, 6};
  bload::BlockTable request{
      torch::tensor({0, 0, 3, 0, 0, 3, 0, 3, 2, 1, 0, 2, 1, 0, 4, 2, 2, 6}, torch::kLong)
          .view({3, 6}),
      2, 6};
  auto dataset = bload::BlockDataset(SyntheticSequences(lengths),
                                     bload::Options(6).data_padding(-1).target_padding(-100));
  auto batch = dataset.get_batch(request);

  auto data = torch::tensor({0, 1, 2, 1000, 1001, -1, 2002, 2003, 2004, 2005, -1, -1},
                            torch::kFloat)
                  .view({2, 6});
  auto padding = data == -1;
  EXPECT(torch::equal(batch.data.select(2, 0), data));
  EXPECT(torch::equal(batch.data.select(2, 1), torch::where(padding, data, -data)));
  EXPECT(torch::equal(batch.target,
                      torch::tensor({0, 0, 0, 1, 1, -100, 2, 2, 2, 2, -100, -100}).view({2, 6})));
  EXPECT(torch::equal(batch.reset, torch::tensor({1, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0})
                                       .to(torch::kBool)
                                       .view({2, 6})));
  EXPECT(torch::equal(batch.valid, ~padding));
  EXPECT(torch::equal(batch.segment_ids,
                      torch::tensor({0, 0, 0, 1, 1, -1, 0, 0, 0, 0, -1, -1}, torch::kInt).view({2, 6})));
  EXPECT(torch::equal(batch.position_ids,
                      torch::tensor({0, 1, 2, 0, 1, 0, 2, 3, 4, 5, 0, 0}, torch::kLong).view({2, 6})));
  EXPECT(torch::equal(batch.cu_seqlens, torch::tensor({0, 3, 5, 9}, torch::kInt)));
  EXPECT(torch::equal(batch.indices, torch::tensor({0, 1, 2}, torch::kLong)));
  // unpack gives the pieces back.
  auto pieces = bload::unpack(batch.data, request.table);
  EXPECT(pieces.size() == 3 && torch::equal(pieces[2], SyntheticSequences(lengths).get(2).data.slice(0, 2)));
}

void dataset_pins_memory_where_a_cuda_device_is_present() {
  const auto lengths = action_genome_lengths();
  const auto options = bload::Options(94).blocks_per_batch(4);
  auto request = *bload::BlockSampler(lengths, options).next();
  auto pinned = bload::BlockDataset(SyntheticSequences(lengths), bload::Options(options).pin_memory(true))
                    .get_batch(request);
  auto plain = bload::BlockDataset(SyntheticSequences(lengths), options).get_batch(request);
  // Without a device, pinning falls back to ordinary memory (with a warning).
  EXPECT(pinned.data.is_pinned() == torch::cuda::is_available());
  EXPECT(pinned.target.is_pinned() == torch::cuda::is_available());
  EXPECT(torch::equal(pinned.data, plain.data) && torch::equal(pinned.target, plain.target));
}

void dataset_rejects_examples_of_the_wrong_length() {
  // The sampler plans with lengths that disagree with the dataset's sequences.
  const std::vector<int64_t> planned{3, 2, 4};
  auto sampler = bload::BlockSampler(planned, bload::Options(9));
  auto dataset = bload::BlockDataset(SyntheticSequences({3, 2, 5}), bload::Options(9));
  auto message = error_of([&] { dataset.get_batch(*sampler.next()); });
  EXPECT(contains(message, "has 5 steps: expected 4, the length of sequence 2"));
}

// Every batch of one epoch through a DataLoader with `workers` threads.
std::vector<bload::PackedBatch> loader_epoch(const std::vector<int64_t>& lengths,
                                             const bload::Options& options, size_t workers) {
  auto loader = torch::data::make_data_loader(
      bload::BlockDataset(SyntheticSequences(lengths), options),
      bload::BlockSampler(lengths, options), torch::data::DataLoaderOptions().workers(workers));
  std::vector<bload::PackedBatch> batches;
  for (auto& batch : *loader) batches.push_back(batch);
  return batches;
}

void loader_with_workers_matches_the_main_thread() {
  const auto lengths = action_genome_lengths();
  const auto options = bload::Options(94).blocks_per_batch(32).world_size(2).rank(1);
  auto main_thread = loader_epoch(lengths, options, 0);
  auto threaded = loader_epoch(lengths, options, 3);
  EXPECT(!main_thread.empty() && main_thread.size() == threaded.size());
  for (size_t i = 0; i < main_thread.size(); ++i) {
    EXPECT(torch::equal(main_thread[i].data, threaded[i].data));
    EXPECT(torch::equal(main_thread[i].target, threaded[i].target));
    EXPECT(torch::equal(main_thread[i].reset, threaded[i].reset));
    // Every real step holds the sequence it belongs to: its target (the sequence's index) is
    // its first feature's thousands.
    const auto& batch = main_thread[i];
    auto from_data = (batch.data.select(2, 0).masked_select(batch.valid) / 1000).floor();
    EXPECT(torch::equal(batch.target.masked_select(batch.valid), from_data.to(torch::kLong)));
  }
}

// One step of examples/cpp/packed_gru.h on packed blocks with resets has the gradients of the
// same sequences run one at a time, summed (a summed squared error on real steps either way).
void packed_gru_gradients_equal_the_sum_over_sequences_run_alone() {
  torch::manual_seed(5);
  PackedGRU model(3, 8, 1);
  auto lengths = torch::randint(1, 24, {60}, torch::kLong);
  std::vector<int64_t> length_list(lengths.data_ptr<int64_t>(), lengths.data_ptr<int64_t>() + 60);
  bload::Planner planner(length_list, bload::Options(24).blocks_per_batch(4).seed(5));
  const auto table = planner.plan(0).batch(0, 0).table;
  const int64_t pieces = table.size(0);
  EXPECT(pieces > 4);  // several sequences share a block

  std::vector<torch::Tensor> data, target;
  for (int64_t row = 0; row < pieces; ++row) {
    const int64_t steps = table[row][bload::kLength].item<int64_t>();
    data.push_back(torch::randn({steps, 3}));
    target.push_back(torch::randn({steps, 1}));
  }
  auto gradients = [&](const torch::Tensor& loss) {
    model->zero_grad();
    loss.backward();
    std::vector<torch::Tensor> grads;
    for (const auto& parameter : model->parameters()) grads.push_back(parameter.grad().clone());
    return grads;
  };
  auto valid = bload::valid_mask(table, 4, 24).unsqueeze(2);
  auto packed_out = model->forward(bload::pack(data, table, 4, 24, 0.0), table);
  auto packed = gradients(((packed_out - bload::pack(target, table, 4, 24, 0.0)).pow(2) * valid).sum());

  std::vector<torch::Tensor> alone;
  for (const auto& grad : packed) alone.push_back(torch::zeros_like(grad));
  for (int64_t row = 0; row < pieces; ++row) {
    const int64_t steps = data[row].size(0);
    auto single = torch::tensor({int64_t{0}, int64_t{0}, steps, int64_t{0}, int64_t{0}, steps}).view({1, 6});
    auto out = model->forward(data[row].unsqueeze(0), single);
    auto grads = gradients((out - target[row].unsqueeze(0)).pow(2).sum());
    for (size_t k = 0; k < grads.size(); ++k) alone[k] += grads[k];
  }
  for (size_t k = 0; k < packed.size(); ++k)
    EXPECT(torch::allclose(packed[k], alone[k], /*rtol=*/1e-5, /*atol=*/1e-5));
  // Without resets inside the blocks (a table with one 24-step piece per block), state leaks
  // from one sequence into the next and the gradients differ: the check above can fail.
  auto no_resets = torch::zeros({4, 6}, torch::kLong);
  for (int64_t block = 0; block < 4; ++block)
    no_resets[block] = torch::tensor({block, int64_t{0}, int64_t{24}, block, int64_t{0}, int64_t{24}});
  auto leaked_out = model->forward(bload::pack(data, table, 4, 24, 0.0), no_resets);
  auto leaked = gradients(((leaked_out - bload::pack(target, table, 4, 24, 0.0)).pow(2) * valid).sum());
  bool differs = false;
  for (size_t k = 0; k < leaked.size(); ++k) differs |= !torch::allclose(leaked[k], alone[k], 1e-5, 1e-5);
  EXPECT(differs);
}

}  // namespace

int main(int argc, char** argv) {
  const std::map<std::string, std::function<void()>> cases{
      {"sampler_ranks_get_equal_batches_and_every_step_once",
       sampler_ranks_get_equal_batches_and_every_step_once},
      {"sampler_split_sequences_are_covered_once", sampler_split_sequences_are_covered_once},
      {"sampler_epochs_advance_on_reset_and_differ", sampler_epochs_advance_on_reset_and_differ},
      {"sampler_epoch_handle_reaches_the_loader_copy", sampler_epoch_handle_reaches_the_loader_copy},
      {"sampler_resumes_mid_epoch_after_load", sampler_resumes_mid_epoch_after_load},
      {"sampler_resumes_through_a_data_loader", sampler_resumes_through_a_data_loader},
      {"sampler_load_rejects_other_lengths_options_and_bad_archives",
       sampler_load_rejects_other_lengths_options_and_bad_archives},
      {"sampler_rejects_bad_arguments", sampler_rejects_bad_arguments},
      {"dataset_packs_a_hand_computed_batch", dataset_packs_a_hand_computed_batch},
      {"dataset_pins_memory_where_a_cuda_device_is_present",
       dataset_pins_memory_where_a_cuda_device_is_present},
      {"dataset_rejects_examples_of_the_wrong_length", dataset_rejects_examples_of_the_wrong_length},
      {"loader_with_workers_matches_the_main_thread", loader_with_workers_matches_the_main_thread},
      {"packed_gru_gradients_equal_the_sum_over_sequences_run_alone",
       packed_gru_gradients_equal_the_sum_over_sequences_run_alone},
  };
  if (argc > 1 && cases.count(argv[1]) == 0) {
    std::cout << "no test case named " << argv[1] << "\n";
    return 1;
  }
  int failures = 0;
  for (const auto& [name, run] : cases) {
    if (argc > 1 && name != argv[1]) continue;
    try {
      run();
      std::cout << "ok   " << name << "\n";
    } catch (const std::exception& error) {
      std::cout << "FAIL " << name << ": " << error.what() << "\n";
      ++failures;
    }
  }
  return failures == 0 ? 0 : 1;
}
