// bload::BlockSampler's saved state: state_dict and load_state_dict (a dict of plain values, the
// format Python's sampler saves too), and save and load (the same fields as entries of a torch
// archive). The format, its checksum and every check of a state read back are the core's
// (src/plan/state.rs): a damaged state, one of another version, or one saved for other lengths or
// options is refused with a message that names the field. read_archive reads the archive itself
// with torch's reader, whose failures it turns into bload's errors.

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

constexpr const char* kPrefix = "bload_sampler.";
constexpr const char* kLoad = "bload::BlockSampler::load: ";

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
  TORCH_CHECK(
      false, "bload::read_archive: ", source,
      " cannot be read as a torch archive (corrupted, truncated or another format): ", problem);
}

}  // namespace

void read_archive(torch::serialize::InputArchive& archive, std::istream& stream) {
  reading("the stream", [&] { archive.load_from(stream); });
}

void read_archive(torch::serialize::InputArchive& archive, const std::string& path) {
  reading("'" + path + "'", [&] { archive.load_from(path); });
}

SamplerState BlockSampler::state() const {
  // Before the first epoch there is no plan, so no position.
  std::optional<EpochPosition> at;
  if (plan_) at = plan_->position(position_);
  return planner_.sampler_state(at, next_epoch_);
}

void BlockSampler::restore_state(const SamplerState& state, const std::string& prefix,
                                 const std::string& suffix) {
  // With a shared plan directory, the resumed epoch is shared on the node like any other.
  const auto& options = planner_.options();
  auto read = planner_.resume_shared_state(state, prefix, suffix, options.shared_plan_dir(),
                                           options.local_rank(), options.shared_plan_timeout());
  std::optional<EpochPlan> plan;
  int64_t position = 0;
  if (read.resumed) {
    plan = std::move(read.resumed->plan);
    position = read.resumed->batches;
    if (plan->shared()) planner_ = planner_.with_lengths_of(*plan);
  }
  restore(std::move(plan), position, read.next_epoch);
}

c10::Dict<std::string, c10::IValue> BlockSampler::state_dict() const {
  auto dict = c10::impl::toTypedDict<std::string, c10::IValue>(
      c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get()));
  for (auto& [name, value] : state()) dict.insert(name, std::move(value));
  return dict;
}

void BlockSampler::load_state_dict(const c10::Dict<std::string, c10::IValue>& state) {
  load_state_dict(c10::impl::toGenericDict(state));
}

void BlockSampler::load_state_dict(const c10::impl::GenericDict& state) {
  constexpr const char* kWhere = "bload::BlockSampler::load_state_dict: ";
  SamplerState fields;
  for (const auto& entry : state) {
    TORCH_CHECK(entry.key().isString(), kWhere, "a key of ", entry.key().tagKind(),
                ": expected the dict of strings state_dict() returns");
    fields.emplace_back(entry.key().toStringRef(), entry.value());
  }
  restore_state(fields, std::string(kWhere) + "state['", "']");
}

void BlockSampler::save(torch::serialize::OutputArchive& archive) const {
  for (const auto& [name, value] : state()) archive.write(kPrefix + name, value);
}

void BlockSampler::load(torch::serialize::InputArchive& archive) {
  // The entries the core's format names; the core checks them all. Optional ones (the cost,
  // saved only when not "steps") are read wherever present, whether this sampler saves them or
  // not, so that the core compares them.
  std::vector<std::string> optional;
  for (const auto& name : ffi::optional_state_fields()) optional.emplace_back(name);
  SamplerState fields;
  for (const auto& name : optional) {
    c10::IValue value;
    bool found = false;
    try {
      found = archive.try_read(kPrefix + name, value);
    } catch (const std::exception&) {
      found = false;  // unreadable: the core then reads it as absent, or names it missing
    }
    if (found) fields.emplace_back(name, std::move(value));
  }
  for (const auto& [name, mine] : state()) {
    if (std::find(optional.begin(), optional.end(), name) != optional.end()) continue;
    fields.emplace_back(name, read_entry(archive, name));
  }
  restore_state(fields, std::string(kLoad) + "'" + kPrefix, "'");
}

}  // namespace bload
