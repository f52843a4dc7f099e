// The command line: the usage text, and argv read into a Config, every value checked.
#include "config.h"

#include <bload/planner.h>
#include <c10/util/Exception.h>
#include <torch/cuda.h>

#include <cstdlib>
#include <iostream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <type_traits>

namespace trainer {
namespace {

#ifdef BLOAD_WITH_NCCL
#define BLOAD_GROUPS "NCCL on CUDA, gloo on CPU"
#else
#define BLOAD_GROUPS "gloo: this build has no NCCL"
#endif

constexpr const char* kUsage = R"(usage: ddp_trainer [options]
  --world-size W        ranks to run (default 2)
  --rank R --port P     run one rank, with the launcher's TCPStore on 127.0.0.1:P (set by the
                        launcher; without --rank this process launches every rank, unless
                        torchrun's RANK is set: then it is that rank of WORLD_SIZE, meeting the
                        others at MASTER_ADDR:MASTER_PORT, e.g.
                        torchrun --nnodes N --node-rank I --nproc-per-node P
                          --rdzv-endpoint HOST:PORT --no-python ddp_trainer [options])
  --lengths FILE        one sequence length per line (default: the Action-Genome-shaped set)
  --sequences N         use only the first N sequences of the file (default: all)
  --store DIR           read the sequences and their lengths from the sequence store at DIR
                        (docs/data.md; written by Python: tests/harness/ddp_trainer.py --store DIR
                        writes these generated sequences), packed by ranges of its mapping
  --model cpp|FILE.pt   the C++ torch::nn GRU, or a TorchScript model: tests/support/models.py
                        saves the GRU and the causal transformer (SDPA with bload's mask; not
                        with --policy lanes), e.g. `models.py transformer build/transformer.pt`
  --loop bload|padded|naive
                        packed blocks (default); or shuffled sequences, B a batch (see
                        --blocks-per-batch), each batch padded to its longest; or the naive
                        per-sequence frame-by-frame loop (the last two take no --policy or
                        --t-max)
  --policy NAME         best_fit (default), random_fill, pad_to_max, or lanes: each row of a batch
                        is a lane whose recurrent state the model carries to the next batch
                        (truncated back-propagation), and checkpoints keep every lane's state
  --t-max N             steps per block (default 94)
  --blocks-per-batch B  blocks in each rank's batch (default 8); with --loop padded, sequences
  --epochs E            (default 1)
  --seed S              seed of the plans, the data and the model's weights (default 0)
  --lr X                Adam's learning rate (default 0.01)
  --workers N           DataLoader worker threads per rank (default 1)
  --device cpu|cuda     (default: cuda where available; the process group is )" BLOAD_GROUPS R"()
  --timeout S           seconds a collective may wait for the other ranks (default 300)
  --heartbeat-window S  seconds after which a rank silent (stopped) or stuck behind the others
                        is named by every rank, which then stop (default 30; docs/ddp.md)
  --json                rank 0 ends with one JSON line of the run's figures
  --checkpoint DIR      where rank 0 keeps the last checkpoint, DIR/checkpoint.pt: the model, the
                        optimizer and the position in the epoch (every rank reads it to resume,
                        so on several machines DIR is a shared one)
  --checkpoint-every N  write it after every N batches of an epoch (default 0: never)
  --resume              start from DIR's checkpoint where there is one, else from the beginning
  --step-log FILE       rank R appends to FILE.R a line per piece it trains: "epoch batch
                        sequence offset length", after a "# run" line per run (README))";

[[noreturn]] void bad_argument(const std::string& flag, const std::string& value,
                               const std::string& expected) {
  throw std::invalid_argument(flag + " = \"" + value + "\": expected " + expected);
}

// `value` read whole as a Number (an integer where Number is one) of at least `minimum`.
template <typename Number>
Number parse_number(const std::string& flag, const std::string& value, Number minimum) {
  std::istringstream in(value);
  Number number{};
  in >> number;
  if (value.empty() || in.fail() || !in.eof() || number < minimum) {
    std::ostringstream expected;
    if constexpr (std::is_integral_v<Number>)
      expected << "an integer from " << minimum << " to " << std::numeric_limits<Number>::max();
    else expected << "a number of at least " << minimum;
    bad_argument(flag, value, expected.str());
  }
  return number;
}

// Environment variable `name`, required: torchrun sets them all.
std::string required(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr)
    bad_argument(name, "",
                 "set where RANK is (torchrun sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)");
  return value;
}

// torchrun's environment: this process is rank RANK of WORLD_SIZE, and the ranks meet at the
// TCPStore on MASTER_ADDR:MASTER_PORT. Rank 0 hosts it, unless torchrun's agent already does
// (TORCHELASTIC_USE_AGENT_STORE, as torch.distributed reads it).
void from_torchrun(Config& config, bool world_size_given) {
  config.torchrun = true;
  config.rank = parse_number<int64_t>("RANK", required("RANK"), 0);
  const auto world_size = parse_number<int64_t>("WORLD_SIZE", required("WORLD_SIZE"), 1);
  if (world_size_given && world_size != config.world_size)
    bad_argument(
        "--world-size", std::to_string(config.world_size),
        "WORLD_SIZE = " + std::to_string(world_size) + " under torchrun (or no --world-size)");
  config.world_size = world_size;
  config.master_addr = required("MASTER_ADDR");
  config.port = parse_number<int64_t>("MASTER_PORT", required("MASTER_PORT"), 1);
  const char* local_rank = std::getenv("LOCAL_RANK");
  config.local_rank = local_rank ? parse_number<int64_t>("LOCAL_RANK", local_rank, 0) : config.rank;
  const char* agent_store = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  const bool agent_hosts = agent_store && std::string(agent_store) == "True";
  config.store_rank = agent_hosts ? -1 : 0;
  config.store_server = config.rank == config.store_rank;
  const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
  config.restart = restart ? parse_number<int64_t>("TORCHELASTIC_RESTART_COUNT", restart, 0) : 0;
}

}  // namespace

Config parse(int argc, char** argv) {
  Config config;
  bool world_size_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::cout << kUsage << "\n";
      std::exit(0);
    }
    if (flag == "--json" || flag == "--resume") {
      (flag == "--json" ? config.json : config.resume) = true;
      continue;
    }
    if (i + 1 == argc) bad_argument(flag, "", "a value after it");
    const std::string value = argv[++i];
    if (flag == "--world-size") {
      config.world_size = parse_number<int64_t>(flag, value, 1);
      world_size_given = true;
    } else if (flag == "--rank") config.rank = parse_number<int64_t>(flag, value, 0);
    else if (flag == "--port") config.port = parse_number<int64_t>(flag, value, 1);
    else if (flag == "--lengths") config.lengths = value;
    else if (flag == "--sequences") config.sequences = parse_number<int64_t>(flag, value, 1);
    else if (flag == "--store") config.store = value;
    else if (flag == "--model") config.model = value;
    else if (flag == "--loop") config.loop = value;
    else if (flag == "--policy") config.policy = value;
    else if (flag == "--t-max") config.t_max = parse_number<int64_t>(flag, value, 1);
    else if (flag == "--blocks-per-batch")
      config.blocks_per_batch = parse_number<int64_t>(flag, value, 1);
    else if (flag == "--epochs") config.epochs = parse_number<int64_t>(flag, value, 1);
    else if (flag == "--seed") config.seed = parse_number<int64_t>(flag, value, 0);
    else if (flag == "--lr") config.lr = parse_number(flag, value, 0.0);
    else if (flag == "--workers") config.workers = parse_number<int64_t>(flag, value, 0);
    else if (flag == "--device") config.device = value;
    else if (flag == "--timeout") config.timeout = parse_number<int64_t>(flag, value, 1);
    else if (flag == "--heartbeat-window") config.heartbeat_window = parse_number(flag, value, 0.1);
    else if (flag == "--checkpoint") config.checkpoint = value;
    else if (flag == "--checkpoint-every")
      config.checkpoint_every = parse_number<int64_t>(flag, value, 0);
    else if (flag == "--step-log") config.step_log = value;
    else bad_argument("option", flag, "one of those --help lists");
  }
  try {
    bload::Options().policy(config.policy);  // the core knows the policies' names
  } catch (const c10::Error& error) {
    // The core's message names its argument, "policy = ...: expected ...": the flag is --policy.
    throw std::invalid_argument("--" + std::string(error.what_without_backtrace()));
  }
  if (config.loop != "bload" && config.loop != "padded" && config.loop != "naive")
    bad_argument("--loop", config.loop, "bload, padded or naive");
  if (!config.store.empty() && config.loop != "bload")
    bad_argument("--store", config.store, "no store with --loop padded or naive (they generate)");
  if (config.loop == "naive" && config.model != "cpp")
    bad_argument("--model", config.model, "cpp with --loop naive (it steps the GRU cell itself)");
  if (config.checkpoint.empty() && (config.checkpoint_every > 0 || config.resume))
    bad_argument("--checkpoint", "", "a directory with --checkpoint-every or --resume");
  if (config.loop != "bload" && !(config.checkpoint.empty() && config.step_log.empty()))
    bad_argument("--loop", config.loop, "bload with --checkpoint or --step-log");
  if (config.rank >= 0) {
    config.local_rank = config.rank;  // the launcher's ranks share one machine
    if (config.port == 0) bad_argument("--port", "", "the launcher's store port");
  } else if (std::getenv("RANK")) {
    from_torchrun(config, world_size_given);
  }
  if (config.rank < 0 && config.world_size > kMaxLocalRanks)
    bad_argument("--world-size", std::to_string(config.world_size),
                 "at most " + std::to_string(kMaxLocalRanks) +
                     " ranks started by this launcher on one machine (start more with torchrun)");
  if (config.rank >= config.world_size)
    bad_argument(config.torchrun ? "RANK" : "--rank", std::to_string(config.rank),
                 "less than the world size " + std::to_string(config.world_size));
  if (config.heartbeat_window > 1e6)
    bad_argument("--heartbeat-window", std::to_string(config.heartbeat_window),
                 "a number of seconds from 0.1 to 1000000");
  if (config.port > 65535)
    bad_argument(config.torchrun ? "MASTER_PORT" : "--port", std::to_string(config.port),
                 "a port from 1 to 65535");
  if (config.device.empty()) config.device = torch::cuda::is_available() ? "cuda" : "cpu";
  if (config.device != "cpu" && config.device != "cuda")
    bad_argument("--device", config.device, "cpu or cuda");
  return config;
}

}  // namespace trainer
