// Recovery: checkpoints written whole or not at all, loaded back into the model, the optimizer
// and the samplers, and the per-step log.
#include "checkpoint.h"

#include <bload/sampler.h>
#include <fcntl.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace trainer {
namespace {

std::string file_of(const std::string& dir) {
  return (std::filesystem::path(dir) / "checkpoint.pt").string();
}

[[noreturn]] void failed(const std::string& what, const std::string& path) {
  throw std::runtime_error(what + " " + path + ": " + std::strerror(errno));
}

// Flushes `path` (a file or a directory) to the disk.
void sync(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) failed("cannot open", path);
  const int result = ::fsync(fd);
  ::close(fd);
  if (result != 0) failed("cannot flush", path);
}

std::string parameter_key(size_t index) { return "p" + std::to_string(index); }

}  // namespace

void save_checkpoint(const std::string& dir, const std::vector<at::Tensor>& parameters,
                     torch::optim::Optimizer& optimizer, const bload::BlockSampler& trained,
                     const at::Tensor& lane_states) {
  std::filesystem::create_directories(dir);
  torch::serialize::OutputArchive archive, model, optimizer_state, sampler;
  for (size_t i = 0; i < parameters.size(); ++i)
    model.write(parameter_key(i), parameters[i].detach().cpu());
  model.write("count", static_cast<int64_t>(parameters.size()));
  optimizer.save(optimizer_state);
  trained.save(sampler);
  archive.write("model", model);
  archive.write("optimizer", optimizer_state);
  archive.write("sampler", sampler);
  if (lane_states.defined()) archive.write("lane_state", lane_states.detach().cpu());
  const std::string final_path = file_of(dir), partial = final_path + ".partial";
  archive.save_to(partial);
  sync(partial);
  if (std::rename(partial.c_str(), final_path.c_str()) != 0) failed("cannot rename to", final_path);
  sync(dir);  // the rename itself
}

bool load_checkpoint(const std::string& dir, const std::vector<at::Tensor>& parameters,
                     torch::optim::Optimizer& optimizer,
                     const std::vector<bload::BlockSampler*>& samplers, at::Tensor* lane_states) {
  const std::string path = file_of(dir);
  if (!std::filesystem::exists(path)) return false;
  torch::serialize::InputArchive archive, model, optimizer_state, sampler;
  archive.load_from(path);
  archive.read("model", model);
  archive.read("optimizer", optimizer_state);
  archive.read("sampler", sampler);
  c10::IValue count;
  model.read("count", count);
  TORCH_CHECK(count.isInt() && count.toInt() == static_cast<int64_t>(parameters.size()), path,
              ": the model has ", count, " parameters: expected ", parameters.size(),
              " (a checkpoint of another model?)");
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < parameters.size(); ++i) {
    at::Tensor saved;
    model.read(parameter_key(i), saved);
    TORCH_CHECK(saved.sizes() == parameters[i].sizes(), path, ": parameter ", i, " is ",
                saved.sizes(), ": expected ", parameters[i].sizes(),
                " (a checkpoint of another model?)");
    parameters[i].copy_(saved);
  }
  optimizer.load(optimizer_state);
  for (auto* each : samplers) each->load(sampler);
  at::Tensor saved_lanes;
  if (archive.try_read("lane_state", saved_lanes)) *lane_states = saved_lanes;
  return true;
}

StepLog::StepLog(const Config& config) : config_(config) {
  if (config.step_log.empty()) return;
  const auto path = config.step_log + "." + std::to_string(config.rank);
  out_.open(path, std::ios::app);
  if (!out_) failed("--step-log: cannot append to", path);
}

void StepLog::start(const bload::EpochPosition& at) {
  if (!out_.is_open()) return;
  out_ << "# run: rank " << config_.rank << " of " << config_.world_size << " from epoch "
       << at.epoch << " batch " << at.batches;
  if (at.planned_world_size != at.world_size || at.first_block != 0) {
    out_ << " (the plan for " << at.planned_world_size << " ranks from its batch "
         << at.first_block / (at.planned_world_size * config_.blocks_per_batch) << ")";
  }
  out_ << "\n";
  out_.flush();
}

void StepLog::write(int64_t epoch, int64_t batch, const at::Tensor& table) {
  if (!out_.is_open()) return;
  const auto cells = table.accessor<int64_t, 2>();
  for (int64_t row = 0; row < table.size(0); ++row)
    out_ << epoch << " " << batch << " " << cells[row][bload::kSequence] << " "
         << cells[row][bload::kOffset] << " " << cells[row][bload::kLength] << "\n";
  // Before the all-reduce: a kill after it cannot take lines a checkpoint depends on.
  out_.flush();
}

}  // namespace trainer
