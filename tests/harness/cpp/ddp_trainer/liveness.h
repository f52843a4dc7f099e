// Liveness: which rank was lost when a collective fails. gloo's error names the peer's address
// ("Connection closed by peer [10.0.0.2]:41527"), not its rank, and a rank whose collective fails
// cannot tell a peer that died from one that stopped on an error of its own. So every rank beats
// a heartbeat at the store, and marks itself at the store when it stops on an error: after a
// failure, the ranks whose heartbeat stopped without that mark are the lost ones.
#pragma once

#include <memory>
#include <string>

#include "config.h"

namespace trainer {

class Heartbeat {
 public:
  // Connects to the ranks' store (a connection of its own, so that a collective or a store wait
  // of the training never holds it up) and beats every half second on a thread.
  explicit Heartbeat(const Config& config);
  ~Heartbeat();

  // After a failure: marks this rank as stopping on an error, watches the others' heartbeats for
  // a few seconds, and names the lost ranks ("rank 1 lost (no heartbeat for 3 s)"), or returns ""
  // where every other rank is alive or stopped on an error of its own. Where the store itself is
  // gone, its host is the lost one when a rank hosted it.
  std::string lost_ranks();

 private:
  struct State;  // the store, the thread and its stop signal (liveness.cpp)
  std::unique_ptr<State> state_;
};

}  // namespace trainer
