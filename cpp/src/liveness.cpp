// Liveness of DDP ranks: the keys each rank keeps at the store, the watchdog that reads them
// (rank 0 every rank's, the others rank 0's and its verdict; liveness_watch.cpp), and the naming
// of lost ranks after a failed collective (here, with the class's methods).
//
// Keys, under the prefix:  ws/R       R's world size, set once it joins
//                          beat/R     "BEATS PROGRESS", rewritten every interval
//                          stopped/R  R stopped on an error of its own
//                          finished/R R ended cleanly
//                          verdict    the first fault found (rank 0's, or a start-up failure's)
//                          told/R     R has read the verdict, or told what it saw
#include "liveness_state.h"

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <sstream>

namespace bload {

// After a failure: the other ranks whose heartbeat stopped without a mark of their own.
std::string Liveness::State::lost_ranks() {
  auto& state = *this;
  auto& store = *state.store;
  const auto watch = std::min<Clock::duration>(std::chrono::seconds(3), state.options.window());
  std::vector<int64_t> lost;
  std::string verdict;
  try {
    store.set(key("stopped", state.rank), bytes("1"));
    std::vector<std::string> before(state.world_size);
    for (int64_t other = 0; other < state.world_size; ++other)
      if (other != state.rank && store.check({key("beat", other)}))
        before[other] = text(store.get(key("beat", other)));
    std::this_thread::sleep_for(watch);
    for (int64_t other = 0; other < state.world_size; ++other)
      if (other != state.rank && !before[other].empty() &&
          text(store.get(key("beat", other))) == before[other] && !state.marked(other))
        lost.push_back(other);
    // What a watchdog found, or a rank that failed at start-up, says more than a silence: a
    // rank that failed at start-up closes its connections, failing the others' collectives.
    if (store.check({"verdict"})) verdict = text(store.get("verdict"));
    store.set(key("told", state.rank), bytes("1"));
    // A rank still waiting in a collective fails at the run's timeout at the latest (at its
    // watchdog's window, sooner), and then tells within a watch.
    if (state.rank == state.options.store_rank()) {
      const auto until = Clock::now() + state.options.join_timeout() + 2 * watch;
      for (int64_t other = 0; other < state.world_size; ++other) {
        const bool is_lost = std::find(lost.begin(), lost.end(), other) != lost.end();
        while (other != state.rank && !is_lost && !store.check({key("told", other)}) &&
               Clock::now() < until)
          std::this_thread::sleep_for(state.options.interval() / 5);
      }
    }
  } catch (const std::exception&) {
    const auto host = state.options.store_rank();
    if (host < 0 || host == state.rank) return "";
    return "rank " + std::to_string(host) + " lost (the store it hosted is gone)";
  }
  if (!verdict.empty()) return verdict;
  if (lost.empty()) return "";
  std::ostringstream named;
  named << (lost.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < lost.size(); ++i) named << (i ? ", " : "") << lost[i];
  named << " lost (no heartbeat for " << seconds(watch) << ")";
  return named.str();
}

Liveness::Liveness(const std::string& host, int64_t port, int64_t rank, int64_t world_size,
                   LivenessOptions options)
    : state_(std::make_shared<State>()) {
  TORCH_CHECK(world_size >= 1, "world_size = ", world_size, ": expected at least 1");
  TORCH_CHECK(rank >= 0 && rank < world_size, "rank = ", rank, ": expected a rank from 0 to ",
              world_size - 1, " (world_size = ", world_size, ")");
  TORCH_CHECK(port >= 1 && port <= 65535, "port = ", port, ": expected a port from 1 to 65535");
  auto& state = *state_;
  state.rank = rank;
  state.world_size = world_size;
  state.options = std::move(options);
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<uint16_t>(port);
  store_options.waitWorkers = false;
  store_options.timeout = state.options.join_timeout();
  state.store = c10::make_intrusive<c10d::PrefixStore>(
      state.options.prefix(), c10::make_intrusive<c10d::TCPStore>(host, store_options));
  state.store->set(State::key("beat", rank),
                   State::bytes("0 0"));  // before ws/R: a joined rank has a beat
  state.store->set(State::key("ws", rank), State::bytes(std::to_string(world_size)));
  state.seen.resize(static_cast<size_t>(world_size));
  state.born = state.last_answer = State::Clock::now();
  auto shared = state_;  // the threads keep the state while they run
  state.poller = std::thread([shared] { shared->poll(); });
  state.judge_thread = std::thread([shared] { shared->judge(); });
}

Liveness::~Liveness() {
  auto& state = *state_;
  std::unique_lock<std::mutex> lock(state.mutex);
  state.stopping = true;
  state.wake.notify_all();
  // A poller blocked on a store that no longer answers is left to end on its own.
  const bool done =
      state.wake.wait_for(lock, 4 * state.options.interval(), [&] { return state.poller_done; });
  lock.unlock();
  done ? state.poller.join() : state.poller.detach();
  state.judge_thread.join();
}

void Liveness::started() { state_->started = true; }

void Liveness::advance() { ++state_->progress; }

std::string Liveness::failed(const std::string& error) {
  auto& state = *state_;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    state.quiet = true;
  }
  if (state.started) return state.lost_ranks();
  try {
    state.store->set(State::key("stopped", state.rank), State::bytes("1"));
    state.store->set(State::key("told", state.rank), State::bytes("1"));  // it reads nothing more
    state.store->compareSet("verdict", {},
                            State::bytes("rank " + std::to_string(state.rank) +
                                         " failed at start-up, before the agreement "
                                         "check: " +
                                         error));
    state.wait_for_others({"told", "stopped", "finished"}, -1, state.options.window());
  } catch (const std::exception&) {
    // The store is gone: no one is left to tell.
  }
  return "";
}

void Liveness::finished() {
  auto& state = *state_;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    state.quiet = true;
  }
  try {
    state.store->set(State::key("finished", state.rank), State::bytes("1"));
    state.wait_for_others({"finished", "stopped"}, -1, state.options.window());
  } catch (const std::exception&) {
  }
}

std::string Liveness::fault() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->fault;
}

}  // namespace bload
