// bload::BlockSampler::save and load: the sampler's place in its epoch, in a torch archive.
//
// A job trusts a checkpoint to resume training where it stopped, so an archive must never resume
// anywhere else. Besides its values it carries their checksum, and load() refuses an archive
// whose values do not match it, one that is not a sampler's or of another version, and one saved
// for other lengths or options, each with a message that says which. The checksum is bload's one
// stable hash, the core's (src/plan/hash.rs, pinned by its tests), reached through the bridge
// rather than written again here. read_archive reads the archive itself with torch's reader,
// whose failures it turns into bload's errors.

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <algorithm>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "bload/sampler.h"
#include "rust_bridge.h"

namespace bload {
namespace {

// Changes whenever the meaning of the state does. 2: the checksum, and where a resumed epoch's
// blocks come from (planned_world_size, first_block).
constexpr int64_t kArchiveVersion = 2;
constexpr const char* kPrefix = "bload_sampler.";
constexpr const char* kLoad = "bload::BlockSampler::load: ";

using Field = std::pair<std::string, c10::IValue>;

// The last fields of an archive: where the saver stood in its epoch.
constexpr size_t kPlaceFields = 5;

// The fields of an archive in the order the checksum reads them: the version, what plans depend
// on (the lengths' fingerprint and every option, world_size included: the saver's), then the
// place in the epoch.
std::vector<Field> archive_fields(const Planner& planner, int64_t epoch, int64_t position,
                                  int64_t next_epoch, int64_t planned_world_size,
                                  int64_t first_block) {
  std::vector<Field> fields{
      {"version", kArchiveVersion},
      {"sequences", planner.num_sequences()},
      {"lengths_hash", static_cast<int64_t>(planner.lengths_hash())},
  };
  for (auto& option : plan_options_by_name(planner.options())) fields.push_back(std::move(option));
  // The kPlaceFields fields of the place.
  fields.emplace_back("epoch", epoch);
  fields.emplace_back("position", position);
  fields.emplace_back("next_epoch", next_epoch);
  fields.emplace_back("planned_world_size", planned_world_size);
  fields.emplace_back("first_block", first_block);
  return fields;
}

// The values' stable hash: each value as its kind and its contents in 64-bit words (a string
// as its size and its bytes, eight to a word), so that no two field lists share their words.
int64_t checksum_of(const std::vector<Field>& fields) {
  std::vector<uint64_t> words;
  for (const auto& [name, value] : fields) {
    if (value.isInt()) {
      words.insert(words.end(), {0, static_cast<uint64_t>(value.toInt())});
    } else if (value.isBool()) {
      words.insert(words.end(), {1, value.toBool() ? 1u : 0u});
    } else {
      const auto& text = value.toStringRef();
      words.insert(words.end(), {2, text.size()});
      for (size_t start = 0; start < text.size(); start += 8) {
        uint64_t word = 0;
        for (size_t i = start; i < std::min(start + 8, text.size()); ++i) {
          word |= static_cast<uint64_t>(static_cast<unsigned char>(text[i])) << (8 * (i - start));
        }
        words.push_back(word);
      }
    }
  }
  const rust::Slice<const uint64_t> slice(words.data(), words.size());
  return static_cast<int64_t>(ffi::stable_hash(slice));
}

// An entry of the archive; torch's errors from reading it (whatever their type) become bload's,
// naming the entry.
c10::IValue read_entry(torch::serialize::InputArchive& archive, const std::string& name) {
  c10::IValue value;
  bool found = false;
  std::string problem;
  try {
    found = archive.try_read(kPrefix + name, value);
  } catch (const c10::Error& error) {
    problem = error.what_without_backtrace();
  } catch (const std::exception& error) {
    problem = error.what();
  }
  TORCH_CHECK(problem.empty(), kLoad, "the archive's '", kPrefix, name,
              "' cannot be read (a corrupted archive): ", problem);
  TORCH_CHECK(found, kLoad, "the archive has no '", kPrefix, name,
              "': expected an archive written by bload::BlockSampler::save");
  return value;
}

bool same_kind(const c10::IValue& a, const c10::IValue& b) {
  return (a.isInt() && b.isInt()) || (a.isBool() && b.isBool()) || (a.isString() && b.isString());
}

// The entries named by `expected`, each of the kind of the value there.
std::vector<Field> read_fields(torch::serialize::InputArchive& archive,
                               const std::vector<Field>& expected) {
  std::vector<Field> saved;
  for (const auto& [name, mine] : expected) {
    auto value = read_entry(archive, name);
    TORCH_CHECK(same_kind(value, mine), kLoad, "'", kPrefix, name, "' holds a ", value.tagKind(),
                ": expected a ", mine.tagKind(), " (a corrupted archive)");
    // The version first: it says whether the other fields mean what this code reads them as.
    TORCH_CHECK(name != "version" || value.toInt() == kArchiveVersion, kLoad,
                "archive version = ", value.toInt(), ": expected ", kArchiveVersion,
                " (this bload's; earlier archives have no checksum and are not read)");
    saved.emplace_back(name, std::move(value));
  }
  return saved;
}

// Runs torch's reader, rethrowing whatever it throws as bload's error about `source`.
template <typename Read>
void reading(const std::string& source, Read&& read) {
  std::string problem;
  try {
    read();
    return;
  } catch (const c10::Error& error) {
    problem = error.what_without_backtrace();
  } catch (const std::exception& error) {
    problem = error.what();
  }
  TORCH_CHECK(false, "bload::read_archive: ", source,
              " cannot be read as a torch archive (corrupted, truncated or another format): ",
              problem);
}

}  // namespace

void read_archive(torch::serialize::InputArchive& archive, std::istream& stream) {
  reading("the stream", [&] { archive.load_from(stream); });
}

void read_archive(torch::serialize::InputArchive& archive, const std::string& path) {
  reading("'" + path + "'", [&] { archive.load_from(path); });
}

void BlockSampler::save(torch::serialize::OutputArchive& archive) const {
  const int64_t world_size = planner_.options().world_size();
  // Before the first epoch there is no plan: a position at the start of this world size's.
  const auto at =
      plan_ ? plan_->position(position_)
            : EpochPosition{-1, world_size, 0, world_size,
                            planner_.options().blocks_per_batch(), 0};
  const auto fields = archive_fields(planner_, at.epoch, at.batches, next_epoch_,
                                     at.planned_world_size, at.first_block);
  for (const auto& [name, value] : fields) archive.write(kPrefix + name, value);
  archive.write(std::string(kPrefix) + "checksum", checksum_of(fields));
}

void BlockSampler::load(torch::serialize::InputArchive& archive) {
  const auto expected = archive_fields(planner_, 0, 0, 0, 0, 0);
  const auto saved = read_fields(archive, expected);
  const auto checksum = read_entry(archive, "checksum");
  TORCH_CHECK(checksum.isInt(), kLoad, "'", kPrefix, "checksum' holds a ", checksum.tagKind(),
              ": expected an int (a corrupted archive)");
  const int64_t computed = checksum_of(saved);
  TORCH_CHECK(checksum.toInt() == computed, kLoad, "checksum = ", checksum.toInt(),
              " in the archive: expected ", computed,
              ", the checksum of the values it holds: the archive is corrupted");

  auto value = [&](const std::string& name) -> const c10::IValue& {
    auto named = [&](const Field& field) { return field.first == name; };
    return std::find_if(saved.begin(), saved.end(), named)->second;
  };
  // Saved for the same lengths and options (after the version, before the place); the world size
  // and blocks per batch are the saver's, and the core's resume decides which may differ.
  for (size_t i = 1; i + kPlaceFields < expected.size(); ++i) {
    const auto& [name, mine] = expected[i];
    const bool the_savers = name == "world_size" || name == "blocks_per_batch";
    TORCH_CHECK(the_savers || saved[i].second == mine, kLoad, name, " = ",
                saved[i].second, " in the archive: expected ", mine,
                " as this sampler has; the archive was saved with other lengths or options");
  }
  const int64_t epoch = value("epoch").toInt();
  const int64_t next_epoch = value("next_epoch").toInt();
  TORCH_CHECK(epoch >= -1 && epoch <= kMaxEpoch, kLoad, "epoch = ", epoch,
              " in the archive: expected -1 (before the first epoch) to ", kMaxEpoch);
  TORCH_CHECK(next_epoch >= 0 && next_epoch <= kMaxEpoch + 1, kLoad, "next_epoch = ", next_epoch,
              " in the archive: expected 0 to ", kMaxEpoch + 1);
  std::optional<EpochPlan> plan;
  int64_t position = 0;
  if (epoch >= 0) {
    const EpochPosition at{epoch,
                           value("planned_world_size").toInt(),
                           value("first_block").toInt(),
                           value("world_size").toInt(),
                           value("blocks_per_batch").toInt(),
                           value("position").toInt()};
    try {
      auto resumed = planner_.resume(at);
      plan = std::move(resumed.plan);
      position = resumed.batches;
    } catch (const c10::Error& error) {
      TORCH_CHECK(false, kLoad, "the position in the archive: ", error.what_without_backtrace());
    }
  }
  restore(std::move(plan), position, next_epoch);
}

}  // namespace bload
