#pragma once
// Liveness of DDP ranks, at the ranks' c10d TCPStore: heartbeats, each rank's world size and
// start-up outcome, and a watchdog that names a stalled rank while the others wait in a
// collective, within a window that does not depend on the collectives' timeout.
//
// Without it, a rank stopped (SIGSTOP, a machine that froze) or stuck before a collective (in its
// data loading) holds every other rank in its collective for the whole timeout, and the error
// that ends the wait names an address at best; a rank started with another world size, or one
// that failed before its first collective, leaves the others waiting at the process group's
// rendezvous. Every rank makes one Liveness before the process group, on a connection of its own:
//
//   bload::Liveness liveness(host, port, rank, world_size,
//                            bload::LivenessOptions().window(std::chrono::seconds(30)));
//   ... build the process group, read the data, plan ...   (on an error: liveness.failed(what))
//   liveness.started();                    // the first collective is next
//   for (each batch) { liveness.advance(); ... collectives ... }
//   liveness.finished();                   // a clean end: no rank names this one lost
//
// What the watchdog names, on every rank (docs/ddp.md), then stops the process (exit status 3):
//   "rank 1 lost: no heartbeat for 30 s"                      (stopped, killed, machine gone)
//   "rank 1 stuck: alive, but still at batch 12 for 30 s while rank 0 is at batch 13"
//   "ranks disagree on the world size: rank 0 has 2, rank 1 has 3"
//   "rank 1 failed at start-up, before the agreement check: <its error>"
//   "rank 0 lost: its store has not answered for 30 s"      (the store's host, stopped)
// Rank 0 reads every rank's keys and publishes what it finds; the others read that and rank 0's
// own heartbeat, so the store serves O(ranks) requests a beat, not O(ranks^2).
// Python: bload.distributed.Liveness, the same class (torch.classes.bload.Liveness).

#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "bload/export.h"

namespace bload {

class BLOAD_API LivenessOptions {
 public:
  // A rank is named once it has been silent, or stuck behind the others, for this long: longer
  // than anything a healthy rank does between two batches (a checkpoint's write, say). Default
  // 30 s; at least 100 ms.
  LivenessOptions& window(std::chrono::milliseconds value) {
    TORCH_CHECK(value >= std::chrono::milliseconds(100), "window = ", value.count(),
                " ms: expected at least 100 ms");
    window_ = value;
    return *this;
  }
  // How long a rank may take to join at all (connect to the store, publish its world size): the
  // run's collective timeout. Default 300 s.
  LivenessOptions& join_timeout(std::chrono::milliseconds value) {
    TORCH_CHECK(value.count() > 0, "join_timeout = ", value.count(), " ms: expected more than 0");
    join_timeout_ = value;
    return *this;
  }
  // The rank whose process hosts the store (it waits, when stopping, until the others have read
  // why), or -1 where a launcher or torchrun's agent hosts it (the default).
  LivenessOptions& store_rank(int64_t value) {
    TORCH_CHECK(value >= -1, "store_rank = ", value, ": expected a rank, or -1 for none");
    store_rank_ = value;
    return *this;
  }
  // Keys go under this prefix (default "bload/liveness"); runs that share a store (torchrun's
  // restarts) each take one of their own.
  LivenessOptions& prefix(std::string value) {
    prefix_ = std::move(value);
    return *this;
  }
  // What the watchdog does with a fault, on its own thread. Default: write "rank R: stopped:
  // FAULT" to stderr and end the process with exit status 3 (std::_Exit: nothing else can end a
  // collective that waits on a stopped rank, gloo has no abort).
  LivenessOptions& on_fault(std::function<void(const std::string&)> action) {
    on_fault_ = std::move(action);
    return *this;
  }

  std::chrono::milliseconds window() const { return window_; }
  std::chrono::milliseconds join_timeout() const { return join_timeout_; }
  int64_t store_rank() const { return store_rank_; }
  const std::string& prefix() const { return prefix_; }
  const std::function<void(const std::string&)>& on_fault() const { return on_fault_; }
  // Between beats, and between the watchdog's looks: a sixth of the window, at most 500 ms.
  std::chrono::milliseconds interval() const {
    return std::min(window_ / 6, std::chrono::milliseconds(500));
  }

 private:
  std::chrono::milliseconds window_{30000};
  std::chrono::milliseconds join_timeout_{300000};
  int64_t store_rank_ = -1;
  std::string prefix_ = "bload/liveness";
  std::function<void(const std::string&)> on_fault_;
};

class BLOAD_API Liveness {
 public:
  // Connects to the TCPStore at host:port (waiting up to join_timeout for it), publishes this
  // rank's world size and starts beating and watching, on threads of its own. c10::Error naming
  // the argument for a rank outside [0, world_size) or a bad option.
  Liveness(const std::string& host, int64_t port, int64_t rank, int64_t world_size,
           LivenessOptions options = {});
  ~Liveness();  // stops the threads; marks nothing (see finished())
  Liveness(const Liveness&) = delete;
  Liveness& operator=(const Liveness&) = delete;

  // This rank is ready for its first collective (the agreement check): a failure from here on
  // is no longer a start-up failure.
  void started();
  // Before each batch's collectives: the others tell a rank stuck before a batch (alive, but
  // behind them for a window) from one that is merely slow.
  void advance();
  // This rank stops on an error of its own (`error`): no one names it lost, and its watchdog
  // stops acting (the caller reports). Before started(), every other rank is told, as "rank R
  // failed at start-up, before the agreement check: ERROR", and it returns "". After, the error
  // is most often a collective that failed: it returns which other ranks' heartbeats stopped
  // without a mark of their own ("rank 1 lost (no heartbeat for 3.0 s)"), or "", after watching
  // them for 3 s (or the window, if shorter); where a watchdog or a rank that failed at start-up
  // has told every rank something, that instead. The rank hosting the store returns once the others
  // have read what they need from it (bounded by the join timeout).
  std::string failed(const std::string& error);
  // A clean end: no one names this rank lost once its heartbeat stops.
  void finished();

  // What the watchdog found ("" where nothing yet): the text of the fault it acted on.
  std::string fault() const;
  struct State;  // the connection, the threads and what they saw (cpp/src/liveness_state.h)

 private:
  std::shared_ptr<State> state_;
};

}  // namespace bload
