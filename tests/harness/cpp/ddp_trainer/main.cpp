// The entry point: the launcher without --rank, one rank's run with it.
//
// Data-parallel training of a recurrent model on variable-length sequences, packed by bload.
//
//   ddp_trainer [--world-size 2] [--model cpp|FILE.pt] [--policy best_fit] [--epochs 1] ...
//
// Without --rank it is the launcher (launcher.cpp): it starts a c10d TCPStore, runs one process
// per rank (this same binary with --rank and --port) and waits for them; under torchrun (RANK
// set) it is the one rank torchrun says, meeting the others at MASTER_ADDR:MASTER_PORT. Each
// rank builds a gloo
// process group (group.cpp; NCCL when training on CUDA and built with it), a bload::BlockSampler
// and BlockDataset, and all-reduces the gradients after every batch (training.cpp). `--loop naive`
// runs instead the per-sequence loop that DDP users write first (each rank steps frame by frame
// through its own sequences), which falls out of step; `--timeout` turns its hang into an error.
// Rank 0 reports every rank's figures (report.cpp). Run with --help for every option (config.cpp).

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <bload/liveness.h>
#include <bload/planner.h>
#include <c10/core/Device.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef BLOAD_WITH_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/cuda.h>
#endif

#include <csignal>
#include <iostream>

#include "config.h"
#include "group.h"
#include "launcher.h"
#include "report.h"
#include "training.h"

namespace trainer {
namespace {

std::string message_of(const std::exception& error) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&error);
  return c10_error ? c10_error->what_without_backtrace() : error.what();
}

// This rank's liveness at the ranks' store (bload/liveness.h): its heartbeat, its world size, and
// the watchdog that names a stalled rank within --heartbeat-window, whatever --timeout says.
bload::Liveness join(const Config& config) {
  return bload::Liveness(
      config.master_addr, config.port, config.rank, config.world_size,
      bload::LivenessOptions()
          .window(std::chrono::milliseconds(static_cast<int64_t>(config.heartbeat_window * 1000)))
          .join_timeout(std::chrono::seconds(config.timeout))
          .store_rank(config.store_rank)
          .prefix("bload_trainer/" + std::to_string(config.restart) + "/liveness"));
}

int run_rank(const Config& config) {
  at::set_num_threads(1);  // the ranks share this machine's cores
  // Gradients that decay along long recurrent chains reach denormal floats, which x86 CPUs
  // multiply about 100x slower; treating them as zero changes no result worth keeping.
  at::globalContext().setFlushDenormal(true);
  c10::Device device(config.device == "cuda" ? c10::kCUDA : c10::kCPU);
#ifdef BLOAD_WITH_NCCL
  if (device.is_cuda()) {
    const auto index =
        static_cast<c10::DeviceIndex>(config.local_rank % torch::cuda::device_count());
    c10::cuda::set_device(index);
    device = c10::Device(c10::kCUDA, index);
  }
#endif
  // The store's host starts it first: the liveness and the group connect to it, and the group's
  // rendezvous waits for every rank, which the watchdog watches.
  c10::intrusive_ptr<c10d::TCPStore> store;
  if (config.store_server) {
    c10d::TCPStoreOptions options;
    options.port = static_cast<uint16_t>(config.port);
    options.isServer = true;
    options.waitWorkers = false;
    options.timeout = std::chrono::seconds(config.timeout);
    store = c10::make_intrusive<c10d::TCPStore>(config.master_addr, options);
  }
  auto liveness = join(config);
  std::vector<int64_t> lengths;
  std::shared_ptr<Model> model;
  std::unique_ptr<Group> group;
  try {
    lengths = read_run_lengths(config);
    model = load_model(config, device);
    group = std::make_unique<Group>(config, device, liveness);
  } catch (const std::exception& error) {
    liveness.failed(message_of(error));  // every other rank is told, and names this one
    std::cerr << "rank " << config.rank << ": stopped at start-up: " << message_of(error) << "\n";
    return 3;
  }

  std::vector<EpochFigures> figures;
  try {
    figures = config.loop == "bload"    ? train_packed(config, lengths, *model, *group, device)
              : config.loop == "padded" ? train_padded(config, lengths, *model, *group, device)
                                        : train_naive(config, lengths, *model, *group, device);
  } catch (const std::exception& error) {
    const auto collectives = group->collectives();
    group->close();
    // gloo names a lost peer by its address at best: the heartbeats tell which rank it was.
    const auto lost = liveness.failed(message_of(error));
    std::cerr << "rank " << config.rank << ": stopped after " << collectives
              << " collectives: " << (lost.empty() ? "" : lost + ": ") << message_of(error) << "\n";
    return 3;
  }

  // Every rank's figures, gathered for rank 0's report: the batch counts must agree.
  const auto ranks = unpack(group->gather(pack(figures)));
  liveness.finished();  // the store's host waits here until every rank is done with it
  if (config.rank != 0) return 0;
  return report(config, group->name(), device.str(), ranks) ? 0 : 4;
}

}  // namespace
}  // namespace trainer

int main(int argc, char** argv) try {
  // A write to a socket whose peer died (a lost rank's gloo pair, or the store it hosted) must be
  // an error the collective reports, not SIGPIPE, which would end this rank before it can name the
  // lost one. Python trainers get this for free: the interpreter ignores SIGPIPE at start.
  std::signal(SIGPIPE, SIG_IGN);
  const trainer::Config config = trainer::parse(argc, argv);
  return config.rank < 0 ? trainer::launch(config, argc, argv) : trainer::run_rank(config);
} catch (const c10::Error& error) {
  std::cerr << "error: " << error.what_without_backtrace() << "\n";
  return 1;
} catch (const std::exception& error) {
  std::cerr << "error: " << error.what() << "\n";
  return 1;
}
