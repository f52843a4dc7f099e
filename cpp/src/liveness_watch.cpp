// Liveness's watchdog (liveness_state.h): the heartbeat it writes, the keys it reads (rank 0
// every rank's, the others rank 0's and its verdict), and what it does on a fault.
#include "liveness_state.h"

#include <algorithm>
#include <cstdlib>
#include <initializer_list>

namespace bload {

bool Liveness::State::wait(std::chrono::milliseconds duration) {
  std::unique_lock<std::mutex> lock(mutex);
  wake.wait_for(lock, duration, [this] { return stopping; });
  return !stopping;
}

bool Liveness::State::marked(int64_t other) {
  return store->check({key("stopped", other)}) || store->check({key("finished", other)});
}

void Liveness::State::wait_for_others(std::initializer_list<const char*> marks, int64_t except,
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
    while (!has_mark() && Clock::now() < until) std::this_thread::sleep_for(options.interval() / 5);
  }
}

void Liveness::State::act(const std::string& found, bool store_answers, int64_t culprit) {
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

void Liveness::State::watch_all() {
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
        return publish("ranks disagree on the world size: rank " + std::to_string(rank) + " has " +
                           std::to_string(world_size) + ", rank " + std::to_string(other) +
                           " has " + theirs + " (start every rank with the same world size)",
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

void Liveness::State::publish(const std::string& found, int64_t culprit) {
  store->compareSet("verdict", {}, bytes(found));
  act(text(store->get("verdict")), true, culprit);  // an earlier verdict stands
}

void Liveness::State::watch_leader() {
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

void Liveness::State::poll() {
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

void Liveness::State::judge() {
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

}  // namespace bload
