// The process group: one rank's view of the others (gloo, or NCCL on CUDA), gradients averaged
// over the ranks, small all-gathers, the ranks' agreement on the plan, and a barrier at the store.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config.h"

namespace bload {
class EpochPlan;
class Liveness;
class Planner;
}  // namespace bload

namespace trainer {

class Group {
 public:
  // Meets the other ranks at the store (config.master_addr:port, which must be up: the launcher's,
  // torchrun's agent's, or this process's when config.store_server) and builds the backend. The
  // first collective tells `liveness` that this rank's start-up is done; each gradient all-reduce
  // advances it (the watchdogs name a rank that stays behind the others).
  Group(const Config& config, const c10::Device& device, bload::Liveness& liveness);
  ~Group();

  const std::string& name() const { return name_; }  // "gloo" or "nccl"
  int64_t collectives() const;                       // run so far

  // One all-reduce of every gradient, flattened into one buffer (gloo reduces on the host).
  void average_gradients(const std::vector<at::Tensor>& parameters);

  // Every rank's `mine` (a flat tensor of the same size on every rank), as rows
  // [world_size, size] on the CPU.
  at::Tensor gather(const at::Tensor& mine);

  // Checks that every rank plans the same epoch and serves its own `rank`
  // (bload::check_agreement: one all-gather); a c10::Error naming what differs, on every rank,
  // where they do not.
  void check_agreement(const bload::EpochPlan& plan, const bload::Planner& planner, int64_t rank);

  // Waits at the store until every rank has reached `name` (or the timeout passes).
  void store_barrier(const std::string& name);

  // After a failure: drops the backend, closing this rank's connections, so that a rank waiting
  // on this one in a collective fails at once rather than at its timeout. Nothing after it.
  void close();

 private:
  struct Connection;  // c10d's store and backend (group.cpp)
  std::unique_ptr<Connection> connection_;
  bload::Liveness& liveness_;
  c10::Device device_;
  std::string name_;
};

}  // namespace trainer
