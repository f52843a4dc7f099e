// Liveness: a heartbeat per rank at the store, a mark for a rank that stops on an error, and
// after a failure the ranks whose heartbeat stopped without that mark, named as lost.
#include "liveness.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace trainer {
namespace {

constexpr auto kBeat = std::chrono::milliseconds(500);
// A rank with no heartbeat over this long is lost: six beats, so that a live rank on a busy
// machine is not taken for a lost one.
constexpr auto kWatch = std::chrono::seconds(3);

std::string key(const char* what, int64_t rank) { return std::string(what) + "/" + std::to_string(rank); }

}  // namespace

struct Heartbeat::State {
  int64_t rank = 0, world_size = 0;
  std::chrono::seconds timeout{0};  // the run's --timeout: every rank stops within it
  int64_t store_rank = -1;  // the rank that hosts the store, -1 where the launcher or torchrun's agent does
  c10::intrusive_ptr<c10d::Store> store;
  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  std::thread thread;

  void beat() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stopping) {
      lock.unlock();
      try {
        store->add(key("beat", rank), 1);
      } catch (const std::exception&) {
        return;  // the store is gone: no one is left to read a heartbeat
      }
      lock.lock();
      wake.wait_for(lock, kBeat, [this] { return stopping; });
    }
  }
};

Heartbeat::Heartbeat(const Config& config) : state_(std::make_unique<State>()) {
  auto& state = *state_;
  state.rank = config.rank;
  state.world_size = config.world_size;
  state.store_rank = config.store_rank;
  state.timeout = std::chrono::seconds(config.timeout);
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(config.port);
  options.waitWorkers = false;
  options.timeout = std::chrono::seconds(config.timeout);
  state.store = c10::make_intrusive<c10d::PrefixStore>(
      "bload_trainer/" + std::to_string(config.restart) + "/liveness",
      c10::make_intrusive<c10d::TCPStore>(config.master_addr, options));
  state.thread = std::thread([&state] { state.beat(); });
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stopping = true;
  }
  state_->wake.notify_all();
  state_->thread.join();
}

std::string Heartbeat::lost_ranks() {
  auto& state = *state_;
  auto& store = *state.store;
  std::vector<int64_t> lost;
  try {
    store.set(key("stopped", state.rank), std::vector<uint8_t>{1});
    std::vector<int64_t> beats;
    for (int64_t rank = 0; rank < state.world_size; ++rank) beats.push_back(store.add(key("beat", rank), 0));
    std::this_thread::sleep_for(kWatch);
    for (int64_t rank = 0; rank < state.world_size; ++rank)
      if (rank != state.rank && store.add(key("beat", rank), 0) == beats[rank] &&
          !store.check({key("stopped", rank)}))
        lost.push_back(rank);
    store.set(key("told", state.rank), std::vector<uint8_t>{1});
    if (state.rank == state.store_rank) {
      // The others read the store to tell what happened: its host leaves once every rank that is
      // not lost has told. A rank still waiting in a collective fails at the run's timeout at the
      // latest, and then tells within a watch.
      const auto until = std::chrono::steady_clock::now() + state.timeout + 2 * kWatch;
      for (int64_t rank = 0; rank < state.world_size; ++rank) {
        const bool is_lost = std::find(lost.begin(), lost.end(), rank) != lost.end();
        while (!is_lost && !store.check({key("told", rank)}) &&
               std::chrono::steady_clock::now() < until)
          std::this_thread::sleep_for(kBeat / 5);
      }
    }
  } catch (const std::exception&) {
    // The store is gone, so is the rank that hosted it (where a rank did).
    if (state.store_rank < 0 || state.store_rank == state.rank) return "";
    return "rank " + std::to_string(state.store_rank) + " lost (the store it hosted is gone)";
  }
  if (lost.empty()) return "";
  std::string named = lost.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < lost.size(); ++i) named += (i ? ", " : "") + std::to_string(lost[i]);
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(kWatch).count();
  return named + " lost (no heartbeat for " + std::to_string(seconds) + " s)";
}

}  // namespace trainer
