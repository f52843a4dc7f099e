// The process group: gloo (NCCL when training on CUDA and built with it), the gradients' average
// in one all-reduce, all-gathers, and a barrier at the store.
#include "group.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/stack.h>
#include <bload/agreement.h>
#include <bload/liveness.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/cuda.h>
#ifdef BLOAD_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <chrono>
#include <cstdlib>
#include <sstream>

namespace trainer {

struct Group::Connection {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> backend;
  // The backend as torch's ProcessGroup, the type bload::check_agreement takes.
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  int64_t collectives = 0;

  void run(const c10::intrusive_ptr<c10d::Work>& work) {
    ++collectives;
    work->wait();
  }
};

namespace {

// gloo's network device: loopback for the launcher's ranks (one machine); under torchrun, as
// torch.distributed chooses: GLOO_SOCKET_IFNAME's interfaces, or the address of this host's name.
std::vector<std::shared_ptr<gloo::transport::Device>> gloo_devices(const Config& config) {
  if (!config.torchrun) return {c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")};
  std::vector<std::shared_ptr<gloo::transport::Device>> devices;
  const char* interfaces = std::getenv("GLOO_SOCKET_IFNAME");
  std::istringstream names(interfaces ? interfaces : "");
  for (std::string name; std::getline(names, name, ',');)
    if (!name.empty()) devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
  if (devices.empty()) devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  return devices;
}

}  // namespace

Group::Group(const Config& config, const c10::Device& device, bload::Liveness& liveness)
    : connection_(std::make_unique<Connection>()), liveness_(liveness), device_(device) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(config.port);
  options.isServer = false;  // the host's server is up already (main.cpp): this is a client
  options.waitWorkers = false;
  options.timeout = std::chrono::seconds(config.timeout);
  // torchrun's store outlives a restart of the ranks: each attempt keeps to keys of its own.
  auto& store = connection_->store;
  store = c10::make_intrusive<c10d::PrefixStore>(
      "bload_trainer/" + std::to_string(config.restart),
      c10::make_intrusive<c10d::TCPStore>(config.master_addr, options));
  const auto timeout = std::chrono::milliseconds(config.timeout * 1000);
  const int rank = static_cast<int>(config.rank), size = static_cast<int>(config.world_size);
#ifdef BLOAD_WITH_NCCL
  // NCCL wants a GPU of its own per rank; with fewer GPUs than ranks, gloo it is.
  if (device.is_cuda() && torch::cuda::device_count() >= size) {
    auto nccl = c10d::ProcessGroupNCCL::Options::create();
    nccl->timeout = timeout;
    connection_->backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, nccl);
    name_ = "nccl";
  }
#endif
  if (!connection_->backend) {
    auto gloo = c10d::ProcessGroupGloo::Options::create(timeout);
    gloo->devices = gloo_devices(config);
    connection_->backend = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, gloo);
    name_ = "gloo";
  }
  auto& group = connection_->group;
  group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, size);
  const bool gloo = name_ == "gloo";
  const auto type = gloo ? c10d::ProcessGroup::GLOO : c10d::ProcessGroup::NCCL;
  group->setBackend(gloo ? c10::kCPU : c10::kCUDA, type, connection_->backend);
  group->setDefaultBackend(type);
}

Group::~Group() = default;

int64_t Group::collectives() const { return connection_->collectives; }

void Group::average_gradients(const std::vector<at::Tensor>& parameters) {
  std::vector<at::Tensor> grads;
  for (const auto& parameter : parameters) grads.push_back(parameter.grad().reshape(-1));
  auto flat = at::cat(grads);
  std::vector<at::Tensor> buffer{name_ == "gloo" ? flat.cpu() : flat};
  liveness_.started();
  liveness_.advance();
  connection_->run(connection_->backend->allreduce(buffer));
  auto averaged = buffer[0].to(device_) / connection_->backend->getSize();
  int64_t offset = 0;
  for (const auto& parameter : parameters) {
    const int64_t count = parameter.numel();
    parameter.grad().copy_(averaged.slice(0, offset, offset + count).view_as(parameter));
    offset += count;
  }
}

at::Tensor Group::gather(const at::Tensor& mine) {
  const auto input = name_ == "gloo" ? mine : mine.to(device_);
  std::vector<std::vector<at::Tensor>> all(1);
  for (int rank = 0; rank < connection_->backend->getSize(); ++rank)
    all[0].push_back(at::empty_like(input));
  std::vector<at::Tensor> inputs{input};
  liveness_.started();
  connection_->run(connection_->backend->allgather(all, inputs));
  return at::stack(all[0]).cpu();
}

void Group::check_agreement(const bload::EpochPlan& plan, const bload::Planner& planner,
                            int64_t rank) {
  ++connection_->collectives;
  liveness_.started();
  bload::check_agreement(*connection_->group, plan, planner, rank);
}

void Group::store_barrier(const std::string& name) {
  auto& store = *connection_->store;
  const auto& backend = *connection_->backend;
  liveness_.started();
  store.set(name + "/" + std::to_string(backend.getRank()), std::vector<uint8_t>{1});
  std::vector<std::string> keys;
  for (int rank = 0; rank < backend.getSize(); ++rank)
    keys.push_back(name + "/" + std::to_string(rank));
  store.wait(keys);
}

void Group::close() {
  connection_->group.reset();
  connection_->backend.reset();
}

}  // namespace trainer
