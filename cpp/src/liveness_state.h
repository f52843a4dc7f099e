// Liveness's state (liveness.cpp, whose top comment lists the keys each rank keeps at the store):
// the connection, the watchdog's two threads and what they saw. The watchdog's methods are in
// liveness_watch.cpp; lost_ranks(), the naming after a failed collective, in liveness.cpp.

#pragma once

#include "bload/liveness.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <initializer_list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace bload {

struct Liveness::State {
  using Clock = std::chrono::steady_clock;

  // The store's keys and values (text), and a duration as the messages show it.
  static std::string key(const char* what, int64_t rank) {
    return std::string(what) + "/" + std::to_string(rank);
  }
  static std::vector<uint8_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }
  static std::string text(const std::vector<uint8_t>& bytes) {
    return {bytes.begin(), bytes.end()};
  }
  static std::string seconds(Clock::duration duration) {
    char shown[32];
    std::snprintf(shown, sizeof shown, "%.1f s", std::chrono::duration<double>(duration).count());
    return shown;
  }

  // What rank 0 knows of another rank.
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

  bool wait(std::chrono::milliseconds duration);  // false once stopping

  bool marked(int64_t other);

  // Waits until every other rank (but `except`) has set one of `marks`, up to `bound`: the rank
  // hosting the store leaves only once the others have read what they need from it.
  void wait_for_others(std::initializer_list<const char*> marks, int64_t except,
                       Clock::duration bound);

  // The watchdog found `found`: the caller's action, or by default the report and the end.
  void act(const std::string& found, bool store_answers, int64_t culprit);

  // Rank 0: every rank's keys; a fault becomes the verdict every rank reads.
  void watch_all();

  // Rank 0's verdict for every rank (an earlier one stands), then act() on it.
  void publish(const std::string& found, int64_t culprit);

  // The others: rank 0's verdict, rank 0's heartbeat and world size.
  void watch_leader();

  // Beats, and reads the others: a thread of its own, as any store call may block on a stopped
  // store host (the judge below tells).
  void poll();

  // Watches the poller: a store that stops answering (its host stopped) names the host.
  void judge();

  // After a failure: the other ranks whose heartbeat stopped without a mark of their own.
  std::string lost_ranks();

  std::thread poller, judge_thread;
};

}  // namespace bload
