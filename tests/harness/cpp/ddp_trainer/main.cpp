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
#include <bload/planner.h>
#include <c10/core/Device.h>
#include <c10/util/Exception.h>
#ifdef BLOAD_WITH_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/cuda.h>
#endif

#include <csignal>
#include <iostream>

#include "config.h"
#include "group.h"
#include "launcher.h"
#include "liveness.h"
#include "report.h"
#include "training.h"

namespace trainer {
namespace {

int run_rank(const Config& config) {
  at::set_num_threads(1);  // the ranks share this machine's cores
  // Gradients that decay along long recurrent chains reach denormal floats, which x86 CPUs
  // multiply about 100x slower; treating them as zero changes no result worth keeping.
  at::globalContext().setFlushDenormal(true);
  c10::Device device(config.device == "cuda" ? c10::kCUDA : c10::kCPU);
#ifdef BLOAD_WITH_NCCL
  if (device.is_cuda()) {
    const auto index = static_cast<c10::DeviceIndex>(config.local_rank % torch::cuda::device_count());
    c10::cuda::set_device(index);
    device = c10::Device(c10::kCUDA, index);
  }
#endif
  const auto lengths = read_run_lengths(config);
  auto model = load_model(config, device);
  Group group(config, device);
  Heartbeat heartbeat(config);

  std::vector<EpochFigures> figures;
  try {
    figures = config.loop == "bload"    ? train_packed(config, lengths, *model, group, device)
              : config.loop == "padded" ? train_padded(config, lengths, *model, group, device)
                                        : train_naive(config, lengths, *model, group, device);
  } catch (const std::exception& error) {
    const auto* c10_error = dynamic_cast<const c10::Error*>(&error);
    const auto collectives = group.collectives();
    group.close();
    // gloo names a lost peer by its address at best: the heartbeats tell which rank it was.
    const auto lost = heartbeat.lost_ranks();
    std::cerr << "rank " << config.rank << ": stopped after " << collectives
              << " collectives: " << (lost.empty() ? "" : lost + ": ")
              << (c10_error ? c10_error->what_without_backtrace() : error.what()) << "\n";
    return 3;
  }

  // Every rank's figures, gathered for rank 0's report: the batch counts must agree.
  const auto ranks = unpack(group.gather(pack(figures)));
  if (config.rank != 0) return 0;
  return report(config, group.name(), device.str(), ranks) ? 0 : 4;
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
