// The report: the progress line, the per-epoch figures packed and unpacked field by field, and
// rank 0's summary of every rank's figures (printed per epoch, and with --json).
#include "report.h"

#include <ATen/ops/from_blob.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <type_traits>

namespace trainer {

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

Progress::Progress(bool shown, int64_t total) : shown_(shown), total_(total), tty_(isatty(1)) {}

void Progress::update(int64_t batch, double loss, double batches_per_second,
                      double frames_per_second) {
  if (!shown_) return;
  const bool last = batch == total_;
  if (tty_ ? !(last || seconds_since(drawn_) > 0.1)
           : !(last || batch * 10 / total_ != (batch - 1) * 10 / total_))
    return;
  drawn_ = Clock::now();
  std::printf("%sbatch %lld/%lld  loss %.4f  %.1f steps/s  %.0f frames/s%s", tty_ ? "\r" : "",
              static_cast<long long>(batch), static_cast<long long>(total_), loss,
              batches_per_second, frames_per_second, tty_ && !last ? "" : "\n");
  std::fflush(stdout);
}

std::pair<double, double> ends_of(const std::vector<double>& losses) {
  if (losses.empty()) return {0.0, 0.0};
  const size_t tenth = std::max<size_t>(losses.size() / 10, 1);
  double first = 0, last = 0;
  for (size_t i = 0; i < tenth; ++i) {
    first += losses[i];
    last += losses[losses.size() - 1 - i];
  }
  return {first / tenth, last / tenth};
}

namespace {

// The one list of EpochFigures' fields: their order in a packed epoch. `visit` gets each field
// (a reference into `figures`, const or not).
template <typename Figures, typename Visit>
constexpr void for_each_field(Figures& figures, Visit&& visit) {
  visit(figures.epoch);
  visit(figures.first_batch);
  visit(figures.seconds);
  visit(figures.first_wait);
  visit(figures.wait_share);
  visit(figures.batches);
  visit(figures.frames);
  visit(figures.padding);
  visit(figures.sequential_steps);
  visit(figures.first_loss);
  visit(figures.last_loss);
}

constexpr int64_t kFields = [] {
  EpochFigures figures;
  int64_t count = 0;
  for_each_field(figures, [&](auto&) { ++count; });
  return count;
}();

// Every epoch's figures combined over the ranks.
struct EpochSummary {
  int64_t epoch = 0, first_batch = 0;  // rank 0's
  double seconds = 0;                  // the slowest rank's
  double first_wait = 0;               // the longest
  double wait_share = 0;               // the largest
  std::vector<int64_t> batches_per_rank;
  int64_t frames = 0, padding = 0;       // all ranks'
  int64_t sequential_steps = 0;          // the most of any rank (equal where batches are)
  double first_loss = 0, last_loss = 0;  // mean over the ranks
};

EpochSummary summarize(const std::vector<std::vector<EpochFigures>>& ranks, size_t epoch) {
  EpochSummary summary;
  summary.epoch = ranks.at(0).at(epoch).epoch;
  summary.first_batch = ranks[0][epoch].first_batch;
  for (const auto& rank : ranks) {
    const EpochFigures& figures = rank.at(epoch);
    summary.seconds = std::max(summary.seconds, figures.seconds);
    summary.first_wait = std::max(summary.first_wait, figures.first_wait);
    summary.wait_share = std::max(summary.wait_share, figures.wait_share);
    summary.batches_per_rank.push_back(figures.batches);
    summary.frames += figures.frames;
    summary.padding += figures.padding;
    summary.sequential_steps = std::max(summary.sequential_steps, figures.sequential_steps);
    summary.first_loss += figures.first_loss;
    summary.last_loss += figures.last_loss;
  }
  summary.first_loss /= ranks.size();
  summary.last_loss /= ranks.size();
  return summary;
}

// A JSON number: JSON has no NaN or infinity, so a figure that is not finite is null.
std::string json_number(double value) {
  if (!std::isfinite(value)) return "null";
  std::ostringstream out;
  out << value;
  return out.str();
}

}  // namespace

at::Tensor pack(const std::vector<EpochFigures>& epochs) {
  std::vector<double> values;
  for (const auto& figures : epochs)
    for_each_field(figures,
                   [&](const auto& field) { values.push_back(static_cast<double>(field)); });
  return at::from_blob(values.data(), {static_cast<int64_t>(values.size())}, at::kDouble).clone();
}

std::vector<std::vector<EpochFigures>> unpack(const at::Tensor& gathered) {
  const auto rows = gathered.to(at::kDouble).contiguous();
  const int64_t epochs = rows.size(1) / kFields;
  const double* value = rows.data_ptr<double>();
  std::vector<std::vector<EpochFigures>> ranks(rows.size(0), std::vector<EpochFigures>(epochs));
  for (auto& rank : ranks)
    for (auto& figures : rank)
      for_each_field(figures, [&](auto& field) {
        field = static_cast<std::remove_reference_t<decltype(field)>>(*value++);
      });
  return ranks;
}

bool report(const Config& config, const std::string& backend, const std::string& device,
            const std::vector<std::vector<EpochFigures>>& ranks) {
  // The batch counts must agree, on every rank and in every epoch.
  bool equal = true;
  for (const auto& rank : ranks)
    for (size_t epoch = 0; epoch < rank.size(); ++epoch)
      equal = equal && rank[epoch].batches == ranks[0][epoch].batches;

  std::ostringstream json;
  json << "{\"loop\": \"" << config.loop << "\", \"model\": \"" << config.model
       << "\", \"policy\": \"" << config.policy << "\", \"backend\": \"" << backend
       << "\", \"device\": \"" << device << "\", \"world_size\": " << config.world_size
       << ", \"epochs\": [";
  // The epochs this run trained: all of them, or from a checkpoint's on.
  for (size_t epoch = 0; epoch < ranks.at(0).size(); ++epoch) {
    const EpochSummary summary = summarize(ranks, epoch);
    std::ostringstream per_rank;
    for (size_t rank = 0; rank < summary.batches_per_rank.size(); ++rank)
      per_rank << (rank ? ", " : "") << summary.batches_per_rank[rank];
    const auto frames = static_cast<double>(summary.frames);
    const auto padding = static_cast<double>(summary.padding);
    const std::string from =
        summary.first_batch ? " from batch " + std::to_string(summary.first_batch) : "";
    std::printf(
        "epoch %lld%s: %.2f s on %lld ranks (%s, %s), batches per rank [%s]%s, padding %.2f%% of "
        "steps, first batch after %.2f s, then loader wait %.2f%% of the steps, loss %.4f -> "
        "%.4f\n",
        static_cast<long long>(summary.epoch), from.c_str(), summary.seconds,
        static_cast<long long>(config.world_size), backend.c_str(), config.policy.c_str(),
        per_rank.str().c_str(), equal ? " (equal)" : " (NOT EQUAL)",
        100 * padding / std::max(frames + padding, 1.0), summary.first_wait,
        100 * summary.wait_share, summary.first_loss, summary.last_loss);
    json << (epoch ? ", " : "") << "{\"epoch\": " << summary.epoch
         << ", \"first_batch\": " << summary.first_batch
         << ", \"seconds\": " << json_number(summary.seconds)
         << ", \"first_batch_seconds\": " << json_number(summary.first_wait)
         << ", \"loader_wait_share\": " << json_number(summary.wait_share)
         << ", \"batches_per_rank\": [" << per_rank.str() << "], \"frames\": " << summary.frames
         << ", \"padding\": " << summary.padding
         << ", \"sequential_steps\": " << summary.sequential_steps
         << ", \"first_loss\": " << json_number(summary.first_loss)
         << ", \"last_loss\": " << json_number(summary.last_loss) << "}";
  }
  json << "]}";
  if (config.json) std::printf("%s\n", json.str().c_str());
  std::fflush(stdout);
  return equal;
}

}  // namespace trainer
