// Liveness of DDP ranks: the keys each rank keeps at the store, the watchdog that reads them
// (rank 0 every rank's, the others rank 0's and its verdict), and the naming of lost ranks after a
// failed collective.
//
// Keys, under the prefix:  ws/R       R's world size, set once it joins
//                          beat/R     "BEATS PROGRESS", rewritten every interval
//                          stopped/R  R stopped on an error of its own
//                          finished/R R ended cleanly
//                          verdict    the first fault found (rank 0's, or a start-up failure's)
//                          told/R     R has read the verdict, or told what it saw
#include "bload/liveness.h"

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

namespace bload {
namespace {

using Clock = std::chrono::steady_clock;

std::string key(const char* what, int64_t rank) {
  return std::string(what) + "/" + std::to_string(rank);
}
std::vector<uint8_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }
std::string text(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

std::string seconds(Clock::duration duration) {
  char shown[32];
  std::snprintf(shown, sizeof shown, "%.1f s", std::chrono::duration<double>(duration).count());
  return shown;
}

}  // namespace

struct Liveness::State {
  // What rank 0 knows of another rank (nested: a member's type of the file's anonymous namespace
  // would give this class of the library's namespace a field of internal linkage).
  struct Seen {
    bool joined = false;
    std::string beat;  // the last "BEATS PROGRESS" read
    Clock::time_point changed;
    int64_t progress = 0;
    Clock::time_point behind_since{};  // since when another rank is past this one's progress
  };

  int64_t rank = 0, world_size = 0;
  LivenessOptions options;
  c10::intrusive_ptr<c10d::Store> store;
  std::atomic<int64_t> progress{0};
  std::atomic<bool> started{false};

  std::mutex mutex;  // guards what follows
  std::condition_variable wake;
  bool stopping = false;  // the threads end
  bool quiet = false;     // failed() or finished(): the watchdog no longer acts
  bool acted = false;
  bool poller_done = false;
  std::string fault;
  Clock::time_point last_answer = Clock::now();  // the store's last answer to the poller

  int64_t beats = 0;
  Clock::time_point born = Clock::now();
  std::vector<Seen> seen;  // rank 0's view of every rank; the others' of rank 0

  bool wait(std::chrono::milliseconds duration) {  // false once stopping
    std::unique_lock<std::mutex> lock(mutex);
    wake.wait_for(lock, duration, [this] { return stopping; });
    return !stopping;
  }

  bool marked(int64_t other) {
    return store->check({key("stopped", other)}) || store->check({key("finished", other)});
  }

  // Waits until every other rank (but `except`) has set one of `marks`, up to `bound`: the rank
  // hosting the store leaves only once the others have read what they need from it.
  void wait_for_others(std::initializer_list<const char*> marks, int64_t except,
                       Clock::duration bound) {
    if (rank != options.store_rank()) return;
    const auto until = Clock::now() + bound;
    for (int64_t other = 0; other < world_size; ++other) {
      if (other == rank || other == except) continue;
      auto has_mark = [&] {
        for (const char* mark : marks)
          if (store->check({key(mark, other)})) return true;
        return false;
      };
      while (!has_mark() && Clock::now() < until)
        std::this_thread::sleep_for(options.interval() / 5);
    }
  }

  // The watchdog found `found`: the caller's action, or by default the report and the end.
  void act(const std::string& found, bool store_answers, int64_t culprit) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (quiet || acted) return;
      acted = true;
      fault = found;
    }
    if (options.on_fault()) {
      options.on_fault()(found);
      return;
    }
    std::fprintf(stderr, "rank %lld: stopped: %s\n", static_cast<long long>(rank), found.c_str());
    std::fflush(stderr);
    if (store_answers) {
      try {
        store->set(key("told", rank), bytes("1"));
        wait_for_others({"told", "stopped", "finished"}, culprit,
                        std::max<Clock::duration>(4 * options.interval(), std::chrono::seconds(2)));
      } catch (const std::exception&) {
      }
    }
    std::_Exit(3);
  }

  // Rank 0: every rank's keys; a fault becomes the verdict every rank reads.
  void watch_all() {
    const auto now = Clock::now();
    if (store->check({"verdict"})) return act(text(store->get("verdict")), true, -1);
    std::vector<std::string> keys;
    std::vector<int64_t> ranks;
    for (int64_t other = 0; other < world_size; ++other) {
      if (other == rank) continue;
      auto& seen_other = seen[other];
      if (!seen_other.joined) {
        if (!store->check({key("ws", other)})) {
          if (now - born > options.join_timeout())
            return publish("rank " + std::to_string(other) + " never joined: nothing from it in " +
                               seconds(now - born),
                           other);
          continue;
        }
        seen_other.joined = true;
        seen_other.changed = now;
        const auto theirs = text(store->get(key("ws", other)));
        if (theirs != std::to_string(world_size))
          return publish("ranks disagree on the world size: rank " + std::to_string(rank) +
                             " has " + std::to_string(world_size) + ", rank " +
                             std::to_string(other) + " has " + theirs +
                             " (start every rank with the same world size)",
                         -1);  // it reads
      }
      keys.push_back(key("beat", other));
      ranks.push_back(other);
    }
    if (keys.empty()) return;
    const auto values = store->multiGet(keys);
    int64_t furthest = progress.load(), leader = rank;
    for (size_t i = 0; i < ranks.size(); ++i) {
      auto& seen_other = seen[ranks[i]];
      const auto beat = text(values[i]);
      if (beat != seen_other.beat) {
        seen_other.beat = beat;
        seen_other.changed = now;
        const int64_t progressed = std::stoll(beat.substr(beat.find(' ') + 1));
        if (progressed != seen_other.progress) seen_other.behind_since = {};
        seen_other.progress = progressed;
      }
      if (seen_other.progress > furthest) {
        furthest = seen_other.progress;
        leader = ranks[i];
      }
    }
    for (int64_t other : ranks) {
      auto& seen_other = seen[other];
      if (now - seen_other.changed > options.window() && !marked(other))
        return publish("rank " + std::to_string(other) + " lost: no heartbeat for " +
                           seconds(now - seen_other.changed),
                       other);
      // Behind another rank, which waits for it in a collective: stuck, once for a window. A rank
      // before its first batch is still starting (planning, loading): its heartbeat says enough.
      if (seen_other.progress < 1 || seen_other.progress >= furthest) {
        seen_other.behind_since = {};
        continue;
      }
      if (seen_other.behind_since == Clock::time_point{}) seen_other.behind_since = now;
      if (now - seen_other.behind_since > options.window() && !marked(other))
        return publish("rank " + std::to_string(other) + " stuck: alive, but still at batch " +
                           std::to_string(seen_other.progress) + " for " +
                           seconds(now - seen_other.behind_since) + " while rank " +
                           std::to_string(leader) + " is at batch " + std::to_string(furthest) +
                           " (stuck in its data loading, or in a loop of its own?)",
                       other);
    }
  }

  void publish(const std::string& found, int64_t culprit) {
    store->compareSet("verdict", {}, bytes(found));
    act(text(store->get("verdict")), true, culprit);  // an earlier verdict stands
  }

  // The others: rank 0's verdict, rank 0's heartbeat and world size.
  void watch_leader() {
    const auto now = Clock::now();
    if (store->check({"verdict"})) return act(text(store->get("verdict")), true, -1);
    auto& leader = seen[0];
    if (!leader.joined) {
      if (!store->check({key("ws", 0)})) {
        if (now - born > options.join_timeout())
          act("rank 0 never joined: nothing from it in " + seconds(now - born), true, 0);
        return;
      }
      leader.joined = true;
      leader.changed = now;
      const auto theirs = text(store->get(key("ws", 0)));
      if (theirs != std::to_string(world_size))
        return act("ranks disagree on the world size: rank 0 has " + theirs + ", rank " +
                       std::to_string(rank) + " has " + std::to_string(world_size) +
                       " (start every rank with the same world size)",
                   true, 0);
    }
    const auto beat = text(store->get(key("beat", 0)));
    if (beat != leader.beat) {
      leader.beat = beat;
      leader.changed = now;
    }
    if (now - leader.changed > options.window() && !marked(0))
      act("rank 0 lost: no heartbeat for " + seconds(now - leader.changed), true, 0);
  }

  // Beats, and reads the others: a thread of its own, as any store call may block on a stopped
  // store host (the judge below tells).
  void poll() {
    while (true) {
      try {
        store->set(key("beat", rank),
                   bytes(std::to_string(beats++) + " " + std::to_string(progress.load())));
        if (world_size > 1) rank == 0 ? watch_all() : watch_leader();
        std::lock_guard<std::mutex> lock(mutex);
        last_answer = Clock::now();
      } catch (const std::exception&) {
        // The store is gone, and with it the rank that hosted it (where a rank did).
        const auto host = options.store_rank();
        if (host != rank)
          act(host >= 0 ? "rank " + std::to_string(host) + " lost: the store it hosted is gone"
                        : std::string("the ranks' store is gone"),
              false, host);
        break;
      }
      if (!wait(options.interval())) break;
    }
    std::lock_guard<std::mutex> lock(mutex);
    poller_done = true;
    wake.notify_all();
  }

  // Watches the poller: a store that stops answering (its host stopped) names the host.
  void judge() {
    while (wait(options.interval())) {
      Clock::duration silent;
      {
        std::lock_guard<std::mutex> lock(mutex);
        silent = Clock::now() - last_answer;
      }
      if (silent > options.window()) {
        const auto host = options.store_rank();
        act((host >= 0 ? "rank " + std::to_string(host) + " lost: its store"
                       : std::string("the ranks' store")) +
                " has not answered for " + seconds(silent),
            false, host);
      }
    }
  }

  // After a failure: the other ranks whose heartbeat stopped without a mark of their own.
  std::string lost_ranks() {
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

  std::thread poller, judge_thread;
};

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
  state.store->set(key("beat", rank), bytes("0 0"));  // before ws/R: a joined rank has a beat
  state.store->set(key("ws", rank), bytes(std::to_string(world_size)));
  state.seen.resize(static_cast<size_t>(world_size));
  state.born = state.last_answer = Clock::now();
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
    state.store->set(key("stopped", state.rank), bytes("1"));
    state.store->set(key("told", state.rank), bytes("1"));  // it reads nothing more
    state.store->compareSet("verdict", {},
                            bytes("rank " + std::to_string(state.rank) +
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
    state.store->set(key("finished", state.rank), bytes("1"));
    state.wait_for_others({"finished", "stopped"}, -1, state.options.window());
  } catch (const std::exception&) {
  }
}

std::string Liveness::fault() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->fault;
}

}  // namespace bload
