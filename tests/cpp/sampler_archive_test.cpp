// bload::BlockSampler's save and load: resuming where it was, through a DataLoader too, on another
// world size, and archives that are corrupted byte by byte, tampered with, foreign or for other
// lengths and options.

#include "test_support.h"

#include <chrono>
#include <iostream>
#include <sstream>

namespace sampler_archive_test {
namespace {

using bload_test::action_genome_lengths;
using bload_test::contains;
using bload_test::epoch_tables;
using bload_test::error_of;
using bload_test::expect_exactly_once;
using bload_test::load;
using bload_test::same_tables;
using bload_test::saved;
using bload_test::SyntheticSequences;

// Every entry a sampler's archive holds.
const std::vector<std::string> kEntries{"version",
                                        "sequences",
                                        "lengths_hash",
                                        "t_max",
                                        "blocks_per_batch",
                                        "world_size",
                                        "seed",
                                        "policy",
                                        "split_oversized",
                                        "epoch",
                                        "position",
                                        "next_epoch",
                                        "planned_world_size",
                                        "first_block",
                                        "checksum"};

// The archive `bytes` written again with entry `name` set to `value` (or left out if `value` is
// none), the others as they were: an archive tampered with, rather than one saved.
std::string rewritten(const std::string& bytes, const std::string& name,
                      const std::optional<c10::IValue>& value) {
  torch::serialize::InputArchive in;
  std::istringstream stream(bytes);
  in.load_from(stream);
  torch::serialize::OutputArchive out;
  for (const auto& entry : kEntries) {
    c10::IValue saved_value;
    EXPECT_TRUE(in.try_read("bload_sampler." + entry, saved_value)) << entry;
    if (entry != name) {
      out.write("bload_sampler." + entry, saved_value);
    } else if (value) {
      out.write("bload_sampler." + entry, *value);
    }
  }
  std::ostringstream result;
  out.save_to(result);
  return result.str();
}

// Serves `count` batches (or, with -1, the rest of the epoch) and keeps their tables.
void serve(bload::BlockSampler& sampler, int64_t count, std::vector<at::Tensor>& tables) {
  for (int64_t i = 0; count < 0 || i < count; ++i) {
    auto request = sampler.next();
    if (!request) {
      ASSERT_LT(count, 0) << "the epoch ended after " << i << " of " << count << " batches";
      return;
    }
    EXPECT_EQ(request->blocks, sampler.planner().options().blocks_per_batch());
    tables.push_back(request->table);
  }
}

TEST(BlockSamplerArchive, ResumesMidEpochAfterLoad) {
  const auto lengths = action_genome_lengths();
  const auto options = bload::Options(94).world_size(3).rank(2).blocks_per_batch(2);
  bload::BlockSampler original(lengths, options);
  epoch_tables(original);  // epoch 0
  original.reset();        // epoch 1
  for (int i = 0; i < 17; ++i) original.next();
  const auto bytes = saved(original);

  bload::BlockSampler resumed(lengths, options);
  load(resumed, bytes);
  EXPECT_EQ(resumed.epoch(), 1);
  EXPECT_EQ(resumed.position(), 17);
  resumed.reset();  // as a DataLoader does before iterating: resumes, does not advance
  while (auto expected = original.next()) {
    auto got = resumed.next();
    ASSERT_TRUE(got.has_value());
    EXPECT_TRUE(torch::equal(got->table, expected->table));
  }
  EXPECT_FALSE(resumed.next().has_value());
  EXPECT_TRUE(same_tables(epoch_tables(resumed), epoch_tables(original)));  // epoch 2 on both
}

// The tables of `epoch` as a sampler that never loaded a state serves it.
std::vector<at::Tensor> fresh_epoch(const std::vector<int64_t>& lengths,
                                    const bload::Options& options, int64_t epoch) {
  bload::BlockSampler sampler(lengths, options);
  sampler.epoch_handle().set_epoch(epoch);
  return epoch_tables(sampler);
}

// A state saved after its epoch's last batch has nothing left of it: an epoch set after the
// load, or a later one set before it, is served (the loop's next epoch is not lost to an empty
// rest); with none set, the rest (empty) and then the epoch after it.
TEST(BlockSamplerArchive, AnEpochSetAroundLoadingAFinishedOneIsServed) {
  const auto lengths = action_genome_lengths();
  const auto options = bload::Options(94).blocks_per_batch(4);
  bload::BlockSampler original(lengths, options);
  const auto epoch0 = epoch_tables(original);  // served whole
  const auto bytes = saved(original);
  const auto epoch1 = fresh_epoch(lengths, options, 1);
  ASSERT_FALSE(epoch1.empty());
  for (bool set_before_load : {false, true}) {
    bload::BlockSampler resumed(lengths, options);
    if (set_before_load) resumed.epoch_handle().set_epoch(1);
    load(resumed, bytes);
    if (!set_before_load) resumed.epoch_handle().set_epoch(1);
    EXPECT_TRUE(same_tables(epoch_tables(resumed), epoch1)) << set_before_load;
    EXPECT_EQ(resumed.epoch(), 1);
  }
  bload::BlockSampler resumed(lengths, options);
  load(resumed, bytes);
  EXPECT_TRUE(epoch_tables(resumed).empty());
  EXPECT_TRUE(same_tables(epoch_tables(resumed), epoch1));
  // The finished epoch set again starts over, as Python's sampler does.
  bload::BlockSampler again(lengths, options);
  load(again, bytes);
  again.epoch_handle().set_epoch(0);
  EXPECT_TRUE(same_tables(epoch_tables(again), epoch0));
}

// The epoch a state was saved in, set again after the load (a loop that sets each epoch), goes on
// from the state, and the request is spent: the next reset goes on to the epoch after it, and
// an epoch set before the load gives way to the state.
TEST(BlockSamplerArchive, TheResumedEpochSetAgainIsServedOnce) {
  const auto lengths = action_genome_lengths();
  const auto options = bload::Options(94).blocks_per_batch(4);
  bload::BlockSampler original(lengths, options);
  original.epoch_handle().set_epoch(2);
  original.reset();
  for (int i = 0; i < 5; ++i) original.next();
  const auto bytes = saved(original);
  std::vector<at::Tensor> rest;
  serve(original, -1, rest);
  const auto epoch3 = epoch_tables(original);
  for (int64_t set_before_load : {-1, 0, 2, 7}) {
    bload::BlockSampler resumed(lengths, options);
    if (set_before_load >= 0) resumed.epoch_handle().set_epoch(set_before_load);
    load(resumed, bytes);
    if (set_before_load < 0) resumed.epoch_handle().set_epoch(2);
    EXPECT_TRUE(same_tables(epoch_tables(resumed), rest)) << set_before_load;
    EXPECT_TRUE(same_tables(epoch_tables(resumed), epoch3)) << set_before_load;
    EXPECT_EQ(resumed.epoch(), 3);
  }
  // Another epoch set after the load, then the loaded one: as in Python, the other epoch
  // started and the loaded one set again starts over.
  const auto epoch2 = fresh_epoch(lengths, options, 2);
  bload::BlockSampler resumed(lengths, options);
  load(resumed, bytes);
  resumed.epoch_handle().set_epoch(4);
  resumed.epoch_handle().set_epoch(2);
  EXPECT_TRUE(same_tables(epoch_tables(resumed), epoch2));
}

TEST(BlockSamplerArchive, ResumesThroughADataLoader) {
  const auto lengths = action_genome_lengths();
  const auto options = bload::Options(94).blocks_per_batch(16);
  bload::BlockSampler original(lengths, options);
  original.reset();
  for (int i = 0; i < 5; ++i) original.next();
  bload::BlockSampler resumed(lengths, options);
  load(resumed, saved(original));

  auto loader =
      torch::data::make_data_loader(bload::BlockDataset(SyntheticSequences(lengths), options),
                                    std::move(resumed), torch::data::DataLoaderOptions());
  std::vector<at::Tensor> rest_of_epoch;
  for (auto& batch : *loader) rest_of_epoch.push_back(batch.table);
  std::vector<at::Tensor> expected;
  while (auto request = original.next()) expected.push_back(request->table);
  EXPECT_FALSE(expected.empty());
  EXPECT_TRUE(same_tables(rest_of_epoch, expected));
}

// Where the sampler's values lie in a torch archive (a zip): the local entry of ".../data.pkl",
// its header and its (stored, uncompressed) contents, as [begin, end). The sizes are read from
// the zip's central directory, as torch's writer leaves them out of the local header.
std::pair<size_t, size_t> values_region(const std::string& bytes) {
  auto byte = [&](size_t at) {
    return static_cast<size_t>(static_cast<unsigned char>(bytes.at(at)));
  };
  auto u16 = [&](size_t at) { return byte(at) | byte(at + 1) << 8; };
  auto u32 = [&](size_t at) { return u16(at) | u16(at + 2) << 16; };
  const std::string central_header("PK\x01\x02", 4);
  for (size_t at = bytes.find(central_header); at != std::string::npos;
       at = bytes.find(central_header, at + 4)) {
    const auto name = bytes.substr(at + 46, u16(at + 28));
    if (name.size() > 9 && name.substr(name.size() - 9) == "/data.pkl") {
      const size_t local = u32(at + 42);
      return {local, local + 30 + u16(local + 26) + u16(local + 28) + u32(at + 20)};
    }
  }
  ADD_FAILURE() << "no data.pkl entry in the archive";
  return {0, bytes.size()};
}

TEST(BlockSamplerArchive, EveryFlippedByteIsAnErrorOrTheSamePlace) {
  const auto options = bload::Options(94).world_size(2).rank(1).blocks_per_batch(4);
  const bload::Planner planner(action_genome_lengths(), options);
  bload::BlockSampler original(planner, 1);
  original.epoch_handle().set_epoch(3);
  original.reset();
  for (int i = 0; i < 6; ++i) original.next();
  const auto bytes = saved(original);
  const auto expected_next = original.next()->table;

  // Every byte of the archive in turn, flipped (XOR 0xFF): the load fails with a c10::Error, or,
  // where the byte does not matter (zip metadata torch does not check), resumes exactly where
  // the archive was saved. All but the top byte of each 4-byte length of a pickled string (the
  // pickle opcode 'X' four bytes before) among the values: flipped, it declares a string of
  // about 4 GiB, which torch's unpickler allocates before it finds the archive too short, 2 s
  // and 4 GiB a load. Those loads are refused too, but are no test to run on every build.
  const auto [begin, end] = values_region(bytes);
  EXPECT_GT(end - begin, 200u);
  int64_t refused = 0, same = 0, skipped = 0;
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (i >= begin + 4 && i < end && bytes[i - 4] == 'X') {
      ++skipped;
      continue;
    }
    auto flipped = bytes;
    flipped[i] = static_cast<char>(flipped[i] ^ 0xFF);
    bload::BlockSampler target(planner, 1);
    try {
      load(target, flipped);
    } catch (const c10::Error&) {
      ++refused;
      continue;
    } catch (const std::exception& error) {
      ADD_FAILURE() << "byte " << i << ": not a c10::Error: " << error.what();
      continue;
    }
    ASSERT_EQ(target.epoch(), 3) << "byte " << i;
    ASSERT_EQ(target.position(), 6) << "byte " << i;
    target.reset();
    auto next = target.next();
    ASSERT_TRUE(next.has_value()) << "byte " << i;
    ASSERT_TRUE(torch::equal(next->table, expected_next)) << "byte " << i;
    ++same;
  }
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  std::cout << "archive of " << bytes.size() << " bytes, values in [" << begin << ", " << end
            << "): " << refused + same << " flipped, " << refused << " refused, " << same
            << " resumed in the same place, " << skipped << " string lengths skipped ("
            << took.count() << " s)\n";
  EXPECT_GT(refused, 0);
  EXPECT_LT(skipped, 40);
}

TEST(BlockSamplerArchive, TamperedArchivesAreRefused) {
  const auto lengths = action_genome_lengths();
  const auto options = bload::Options(94).world_size(2).blocks_per_batch(4);
  bload::BlockSampler source(lengths, options);
  source.epoch_handle().set_epoch(3);
  source.reset();
  for (int i = 0; i < 6; ++i) source.next();
  const auto bytes = saved(source);
  bload::BlockSampler target(lengths, options);
  // The archive as saved loads; rewritten unchanged, too.
  load(target, rewritten(bytes, "", std::nullopt));
  EXPECT_EQ(target.epoch(), 3);
  EXPECT_EQ(target.position(), 6);

  bload::BlockSampler fresh(lengths, options);
  EXPECT_TRUE(contains(error_of([&] { load(fresh, rewritten(bytes, "epoch", int64_t{89})); }),
                       "bload::BlockSampler::load: 'bload_sampler.checksum' = "));
  EXPECT_TRUE(contains(error_of([&] { load(fresh, rewritten(bytes, "position", int64_t{5})); }),
                       "the checksum of the values the state holds: the state is corrupted"));
  EXPECT_TRUE(contains(error_of([&] { load(fresh, rewritten(bytes, "version", int64_t{1})); }),
                       "'bload_sampler.version' = 1: expected 2, this bload's format"));
  EXPECT_TRUE(contains(error_of([&] { load(fresh, rewritten(bytes, "checksum", std::nullopt)); }),
                       "the archive has no 'bload_sampler.checksum'"));
  EXPECT_TRUE(
      contains(error_of([&] { load(fresh, rewritten(bytes, "position", c10::IValue("six"))); }),
               "'bload_sampler.position' = a string: expected an int (a corrupted state)"));
  // Every failed load leaves the sampler as it was.
  EXPECT_EQ(fresh.epoch(), -1);
  EXPECT_EQ(fresh.position(), 0);
}

TEST(BlockSamplerArchive, LoadRejectsOtherLengthsOptionsAndForeignArchives) {
  const auto lengths = action_genome_lengths();
  const auto options = bload::Options(94).world_size(2);
  bload::BlockSampler source(lengths, options);
  source.next();
  const auto bytes = saved(source);

  auto changed = lengths;
  changed[10] += 1;
  bload::BlockSampler other_lengths(changed, options);
  EXPECT_TRUE(
      contains(error_of([&] { load(other_lengths, bytes); }), "'bload_sampler.lengths_hash' = "));
  bload::BlockSampler other_seed(lengths, bload::Options(options).seed(5));
  EXPECT_TRUE(
      contains(error_of([&] { load(other_seed, bytes); }),
               "'bload_sampler.seed' = 0: expected 5 as this sampler has; the state was saved with "
               "other lengths or options"));
  bload::BlockSampler other_blocks(lengths, bload::Options(options).blocks_per_batch(3));
  EXPECT_TRUE(contains(error_of([&] { load(other_blocks, bytes); }),
                       "blocks_per_batch = 3: expected 1, the blocks per batch the epoch "
                       "was saved with"));

  // An archive that holds something else.
  torch::serialize::OutputArchive foreign;
  foreign.write("weights", torch::ones({3}));
  std::ostringstream foreign_bytes;
  foreign.save_to(foreign_bytes);
  bload::BlockSampler target(lengths, options);
  EXPECT_TRUE(contains(error_of([&] { load(target, foreign_bytes.str()); }),
                       "the archive has no 'bload_sampler.version'"));
  // Bytes cut short are not an archive at all: torch's reader says so, in bload's words.
  for (size_t size : {size_t{0}, bytes.size() / 2, bytes.size() - 1}) {
    EXPECT_TRUE(contains(error_of([&] { load(target, bytes.substr(0, size)); }),
                         "bload::read_archive: the stream cannot be read as a torch archive "
                         "(corrupted, truncated or another format): "))
        << size;
  }
  EXPECT_TRUE(contains(error_of([&] {
                         torch::serialize::InputArchive archive;
                         bload::read_archive(archive, "/nonexistent/sampler.pt");
                       }),
                       "bload::read_archive: '/nonexistent/sampler.pt' cannot be read"));
  // A failed load leaves the sampler as it was.
  EXPECT_EQ(target.epoch(), -1);
  EXPECT_TRUE(target.next().has_value());
}

TEST(BlockSamplerArchive, ResumesOnAnotherWorldSize) {
  const auto lengths = action_genome_lengths();
  const auto on = [](int64_t world_size, int64_t rank) {
    return bload::Options(94).blocks_per_batch(2).world_size(world_size).rank(rank);
  };
  // Epoch 1 on 3 ranks, 40 batches each; every rank's archive says the same (the rank is not in
  // it): rank 0's is kept.
  std::vector<std::vector<at::Tensor>> served(3);
  std::string on_three;
  for (int64_t rank = 0; rank < 3; ++rank) {
    bload::BlockSampler sampler(lengths, on(3, rank));
    sampler.epoch_handle().set_epoch(1);
    sampler.reset();
    serve(sampler, 40, served[rank]);
    if (rank == 0) on_three = saved(sampler);
  }

  // Resumed on 2 ranks: the rest of epoch 1, the same number of batches on each. One pair of
  // samplers serves it all; another serves 10 batches, is saved and resumed on 3 ranks again.
  std::vector<std::vector<at::Tensor>> rest(2), part(2);
  std::string on_two;
  for (int64_t rank = 0; rank < 2; ++rank) {
    bload::BlockSampler sampler(lengths, on(2, rank));
    load(sampler, on_three);
    EXPECT_EQ(sampler.epoch(), 1);
    EXPECT_EQ(sampler.position(), 0);
    sampler.reset();  // as a DataLoader does: resumes, does not advance
    serve(sampler, -1, rest[rank]);
    // Later epochs are planned for 2 ranks.
    const auto epoch2 = bload::Planner(lengths, on(2, rank)).plan(2);
    std::vector<at::Tensor> expected;
    for (int64_t b = 0; b < epoch2.batches_per_rank(); ++b)
      expected.push_back(epoch2.batch(rank, b).table);
    EXPECT_TRUE(same_tables(epoch_tables(sampler), expected)) << "rank " << rank;

    bload::BlockSampler partly(lengths, on(2, rank));
    load(partly, on_three);
    serve(partly, 10, part[rank]);
    if (rank == 0) on_two = saved(partly);
  }
  EXPECT_EQ(rest[0].size(), rest[1].size());
  EXPECT_GT(rest[0].size(), 10u);
  auto all = served;
  all.insert(all.end(), rest.begin(), rest.end());
  expect_exactly_once(lengths, all);

  // ... and from there on 3 ranks again.
  std::vector<std::vector<at::Tensor>> last(3);
  for (int64_t rank = 0; rank < 3; ++rank) {
    bload::BlockSampler sampler(lengths, on(3, rank));
    load(sampler, on_two);
    serve(sampler, -1, last[rank]);
    EXPECT_EQ(last[rank].size(), last[0].size());
  }
  all = served;
  all.insert(all.end(), part.begin(), part.end());
  all.insert(all.end(), last.begin(), last.end());
  expect_exactly_once(lengths, all);
}

}  // namespace

}  // namespace sampler_archive_test
