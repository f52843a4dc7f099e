// Data-parallel training of a recurrent model on variable-length sequences, packed by bload.
//
//   ddp_trainer [--world-size 2] [--model cpp|FILE.pt] [--policy best_fit] [--epochs 1] ...
//
// Without --rank it is the launcher: it starts a c10d TCPStore, runs one process per rank (this
// same binary with --rank and --port) and waits for them. Each rank builds a gloo process group
// (NCCL when training on CUDA and built with it), a bload::BlockSampler and BlockDataset, and
// all-reduces the gradients after every batch. `--loop naive` runs instead the per-sequence loop
// that DDP users write first (each rank steps frame by frame through its own sequences), which
// falls out of step; `--timeout` turns its hang into an error. Run with --help for every option.

#include <ATen/CPUGeneratorImpl.h>
#include <bload/bload.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/script.h>
#include <torch/torch.h>
#ifdef BLOAD_WITH_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "packed_gru.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

constexpr const char* kUsage = R"(usage: ddp_trainer [options]
  --world-size W        ranks to run (default 2)
  --rank R --port P     run one rank, with the launcher's TCPStore on 127.0.0.1:P (set by the
                        launcher; without --rank this process launches every rank)
  --lengths FILE        one sequence length per line (default: the Action-Genome-shaped set)
  --sequences N         use only the first N sequences of the file (default: all)
  --model cpp|FILE.pt   the C++ torch::nn model, or a TorchScript model (examples/packed_gru.py)
  --loop bload|naive    packed blocks (default), or the naive per-sequence frame-by-frame loop
  --policy NAME         best_fit (default), random_fill or pad_to_max
  --t-max N             steps per block (default 94)
  --blocks-per-batch B  blocks in each rank's batch (default 8)
  --epochs E            (default 1)
  --seed S              seed of the plans, the data and the model's weights (default 0)
  --lr X                Adam's learning rate (default 0.01)
  --workers N           DataLoader worker threads per rank (default 1)
  --device cpu|cuda     (default: cuda where available)
  --timeout S           seconds a collective may wait for the other ranks (default 300)
  --json                rank 0 ends with one JSON line of the run's figures)";

struct Config {
  int64_t world_size = 2;
  int64_t rank = -1;
  int64_t port = 0;
  std::string lengths = BLOAD_DEFAULT_LENGTHS;
  int64_t sequences = 0;
  std::string model = "cpp";
  std::string loop = "bload";
  std::string policy = "best_fit";
  int64_t t_max = 94;
  int64_t blocks_per_batch = 8;
  int64_t epochs = 1;
  int64_t seed = 0;
  double lr = 0.01;
  int64_t workers = 1;
  std::string device;
  int64_t timeout = 300;
  bool json = false;
};

constexpr int64_t kFeatures = 16, kHidden = 64, kOutputs = 1;

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
    expected << (std::is_integral_v<Number> ? "an integer" : "a number") << " of at least "
             << minimum;
    bad_argument(flag, value, expected.str());
  }
  return number;
}

Config parse(int argc, char** argv) {
  Config config;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::cout << kUsage << "\n";
      std::exit(0);
    }
    if (flag == "--json") {
      config.json = true;
      continue;
    }
    if (i + 1 == argc) bad_argument(flag, "", "a value after it");
    const std::string value = argv[++i];
    if (flag == "--world-size") config.world_size = parse_number<int64_t>(flag, value, 1);
    else if (flag == "--rank") config.rank = parse_number<int64_t>(flag, value, 0);
    else if (flag == "--port") config.port = parse_number<int64_t>(flag, value, 1);
    else if (flag == "--lengths") config.lengths = value;
    else if (flag == "--sequences") config.sequences = parse_number<int64_t>(flag, value, 1);
    else if (flag == "--model") config.model = value;
    else if (flag == "--loop") config.loop = value;
    else if (flag == "--policy") config.policy = value;
    else if (flag == "--t-max") config.t_max = parse_number<int64_t>(flag, value, 1);
    else if (flag == "--blocks-per-batch") config.blocks_per_batch = parse_number<int64_t>(flag, value, 1);
    else if (flag == "--epochs") config.epochs = parse_number<int64_t>(flag, value, 1);
    else if (flag == "--seed") config.seed = parse_number<int64_t>(flag, value, 0);
    else if (flag == "--lr") config.lr = parse_number(flag, value, 0.0);
    else if (flag == "--workers") config.workers = parse_number<int64_t>(flag, value, 0);
    else if (flag == "--device") config.device = value;
    else if (flag == "--timeout") config.timeout = parse_number<int64_t>(flag, value, 1);
    else bad_argument("option", flag, "one of those --help lists");
  }
  if (config.policy != "best_fit" && config.policy != "random_fill" && config.policy != "pad_to_max")
    bad_argument("--policy", config.policy, "best_fit, random_fill or pad_to_max");
  if (config.loop != "bload" && config.loop != "naive")
    bad_argument("--loop", config.loop, "bload or naive");
  if (config.loop == "naive" && config.model != "cpp")
    bad_argument("--model", config.model, "cpp with --loop naive (it steps the GRU cell itself)");
  if (config.rank >= config.world_size)
    bad_argument("--rank", std::to_string(config.rank),
                 "less than --world-size " + std::to_string(config.world_size));
  if (config.rank >= 0 && config.port == 0) bad_argument("--port", "", "the launcher's store port");
  if (config.device.empty()) config.device = torch::cuda::is_available() ? "cuda" : "cpu";
  if (config.device != "cpu" && config.device != "cuda")
    bad_argument("--device", config.device, "cpu or cuda");
  return config;
}

// The launcher: a TCPStore for the ranks to meet at, then this binary once per rank.
int launch(const Config& config, int argc, char** argv) {
  c10d::TCPStoreOptions options;
  options.port = 0;  // any free port; the ranks are told which
  options.isServer = true;
  options.waitWorkers = false;
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
  const std::string port = std::to_string(store->getPort());

  std::vector<pid_t> ranks;
  for (int64_t rank = 0; rank < config.world_size; ++rank) {
    std::vector<std::string> words(argv, argv + argc);
    for (const char* extra : {"--rank", "", "--port", ""}) words.emplace_back(extra);
    words[argc + 1] = std::to_string(rank);
    words[argc + 3] = port;
    std::vector<char*> args;
    for (auto& word : words) args.push_back(word.data());
    args.push_back(nullptr);
    pid_t pid = 0;
    if (int error = posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, args.data(), environ)) {
      std::cerr << "could not start rank " << rank << ": " << std::strerror(error) << "\n";
      return 1;
    }
    ranks.push_back(pid);
  }
  // The first rank to fail stops the others: left alone they would wait in their next
  // collective until the timeout.
  int failed = 0;
  for (size_t running = ranks.size(); running > 0; --running) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    const auto rank = std::find(ranks.begin(), ranks.end(), pid) - ranks.begin();
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    std::cerr << "rank " << rank << " failed ("
              << (WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                    : "signal " + std::to_string(WTERMSIG(status)))
              << ")" << (failed ? "" : ": stopping the other ranks") << "\n";
    if (!failed)
      for (pid_t other : ranks)
        if (other != pid) kill(other, SIGTERM);
    failed = 1;
  }
  return failed;
}

// Sequence i: features x [T_i, 16] from a generator seeded by (seed, i), and the target
// y_t = (x_0[0] + ... + x_t[0]) / sqrt(t + 1), a scaled running sum: the model has to carry
// state along a sequence, and must start each sequence from a fresh state.
class RunningSum : public torch::data::datasets::Dataset<RunningSum> {
 public:
  RunningSum(std::vector<int64_t> lengths, int64_t seed)
      : lengths_(std::move(lengths)), seed_(seed) {}

  torch::data::Example<> get(size_t index) override {
    const int64_t steps = lengths_.at(index);
    auto generator = at::make_generator<at::CPUGeneratorImpl>(seed_ * 1000003 + index);
    auto features = at::randn({steps, kFeatures}, generator);
    auto target = features.select(1, 0).cumsum(0) / torch::arange(1, steps + 1).sqrt();
    return {features, target.unsqueeze(1)};
  }

  std::optional<size_t> size() const override { return lengths_.size(); }

 private:
  std::vector<int64_t> lengths_;
  int64_t seed_;
};

// The model either way: the C++ module or a TorchScript one.
struct Model {
  PackedGRU native{nullptr};
  torch::jit::Module script;

  torch::Tensor forward(const torch::Tensor& data, const torch::Tensor& table) {
    if (native) return native->forward(data, table);
    return script.forward({data, table}).toTensor();
  }

  std::vector<torch::Tensor> parameters() {
    if (native) return native->parameters();
    std::vector<torch::Tensor> parameters;
    for (const auto& parameter : script.parameters()) parameters.push_back(parameter);
    return parameters;
  }
};

Model load_model(const Config& config, const torch::Device& device) {
  Model model;
  if (config.model == "cpp") {
    torch::manual_seed(config.seed);  // the same initial weights on every rank
    model.native = PackedGRU(kFeatures, kHidden, kOutputs);
    model.native->to(device);
  } else {
    model.script = torch::jit::load(config.model, device);
    model.script.train();
  }
  return model;
}

// One rank's view of the group: gradients averaged over the ranks, and small all-gathers.
class Group {
 public:
  Group(const Config& config, const torch::Device& device) : device_(device) {
    c10d::TCPStoreOptions options;
    options.port = static_cast<uint16_t>(config.port);
    options.timeout = std::chrono::seconds(config.timeout);
    store_ = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
    const auto timeout = std::chrono::milliseconds(config.timeout * 1000);
    const int rank = static_cast<int>(config.rank), size = static_cast<int>(config.world_size);
#ifdef BLOAD_WITH_NCCL
    // NCCL wants a GPU of its own per rank; with fewer GPUs than ranks, gloo it is.
    if (device.is_cuda() && torch::cuda::device_count() >= size) {
      auto nccl = c10d::ProcessGroupNCCL::Options::create();
      nccl->timeout = timeout;
      backend_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(store_, rank, size, nccl);
      name_ = "nccl";
      return;
    }
#endif
    auto gloo = c10d::ProcessGroupGloo::Options::create(timeout);
    gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    backend_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store_, rank, size, gloo);
    name_ = "gloo";
  }

  const std::string& name() const { return name_; }
  int64_t collectives() const { return collectives_; }

  // One all-reduce of every gradient, flattened into one buffer (gloo reduces on the host).
  void average_gradients(const std::vector<torch::Tensor>& parameters) {
    std::vector<torch::Tensor> grads;
    for (const auto& parameter : parameters) grads.push_back(parameter.grad().reshape(-1));
    auto flat = torch::cat(grads);
    std::vector<torch::Tensor> buffer{name_ == "gloo" ? flat.cpu() : flat};
    run(backend_->allreduce(buffer));
    auto averaged = buffer[0].to(device_) / backend_->getSize();
    int64_t offset = 0;
    for (const auto& parameter : parameters) {
      const int64_t count = parameter.numel();
      parameter.grad().copy_(averaged.slice(0, offset, offset + count).view_as(parameter));
      offset += count;
    }
  }

  // Every rank's `values`, as rows [world_size, values].
  torch::Tensor gather(const std::vector<double>& values) {
    auto mine = torch::tensor(values, torch::kFloat64);
    if (name_ != "gloo") mine = mine.to(device_);
    std::vector<std::vector<torch::Tensor>> all(1);
    for (int rank = 0; rank < backend_->getSize(); ++rank) all[0].push_back(torch::empty_like(mine));
    std::vector<torch::Tensor> inputs{mine};
    run(backend_->allgather(all, inputs));
    return torch::stack(all[0]).cpu();
  }

  // Waits at the store until every rank has reached `name` (or the timeout passes).
  void store_barrier(const std::string& name) {
    store_->set(name + "/" + std::to_string(backend_->getRank()), std::vector<uint8_t>{1});
    std::vector<std::string> keys;
    for (int rank = 0; rank < backend_->getSize(); ++rank)
      keys.push_back(name + "/" + std::to_string(rank));
    store_->wait(keys);
  }

 private:
  void run(const c10::intrusive_ptr<c10d::Work>& work) {
    ++collectives_;
    work->wait();
  }

  torch::Device device_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Backend> backend_;
  std::string name_;
  int64_t collectives_ = 0;
};

// Rank 0's progress line: redrawn in place on a terminal, a line per tenth of the epoch otherwise.
class Progress {
 public:
  Progress(bool shown, int64_t total) : shown_(shown), total_(total), tty_(isatty(1)) {}

  void update(int64_t batch, double loss, double batches_per_second, double frames_per_second) {
    if (!shown_) return;
    const bool last = batch == total_;
    if (tty_ ? !(last || seconds_since(drawn_) > 0.1)
             : !(last || batch * 10 / total_ != (batch - 1) * 10 / total_))
      return;
    drawn_ = Clock::now();
    std::printf("%sbatch %lld/%lld  loss %.4f  %.1f steps/s  %.0f frames/s%s", tty_ ? "\r" : "",
                static_cast<long long>(batch), static_cast<long long>(total_), loss,
                batches_per_second, frames_per_second, tty_ && !last ? "" : "\n");
    std::fflush(stdout);
  }

 private:
  bool shown_;
  int64_t total_;
  bool tty_;
  Clock::time_point drawn_ = Clock::now();
};

struct EpochFigures {
  // The epoch, the wait for its first batch (which also starts the loader's workers), and the
  // share of the rest of the epoch spent waiting for the loader.
  double seconds = 0, first_wait = 0, wait_share = 0;
  int64_t batches = 0, frames = 0, padding = 0;
  double first_loss = 0, last_loss = 0;  // mean loss of the epoch's first and last tenth
};

// Mean of the first and last tenth of `losses`.
std::pair<double, double> ends_of(const std::vector<double>& losses) {
  if (losses.empty()) return {0.0, 0.0};
  const size_t tenth = std::max<size_t>(losses.size() / 10, 1);
  double first = 0, last = 0;
  for (size_t i = 0; i < tenth; ++i) {
    first += losses[i];
    last += losses[losses.size() - 1 - i];
  }
  return {first / tenth, last / tenth};
}

// bload's loop: every rank runs the same number of identically shaped batches.
std::vector<EpochFigures> train_packed(const Config& config, const std::vector<int64_t>& lengths,
                                       Model& model, Group& group, const torch::Device& device) {
  const auto options = bload::Options(config.t_max)
                           .blocks_per_batch(config.blocks_per_batch)
                           .world_size(config.world_size)
                           .rank(config.rank)
                           .seed(config.seed)
                           .policy(config.policy)
                           .pin_memory(device.is_cuda());
  bload::BlockSampler sampler(lengths, options);
  auto epochs = sampler.epoch_handle();
  auto loader = torch::data::make_data_loader(
      bload::BlockDataset(RunningSum(lengths, config.seed), options), sampler,
      torch::data::DataLoaderOptions().workers(config.workers));
  auto parameters = model.parameters();
  torch::optim::Adam optimizer(parameters, torch::optim::AdamOptions(config.lr));

  std::vector<EpochFigures> figures;
  for (int64_t epoch = 0; epoch < config.epochs; ++epoch) {
    epochs.set_epoch(epoch);
    const int64_t total = sampler.planner().plan(epoch).batches_per_rank();
    Progress progress(config.rank == 0, total);
    EpochFigures figure;
    std::vector<double> losses;
    const auto start = Clock::now();
    auto waiting = Clock::now();
    double waited = 0;
    for (auto it = loader->begin(); it != loader->end(); waiting = Clock::now(), ++it) {
      // begin() and ++it wait for the next batch; begin() also starts the workers.
      (figure.batches == 0 ? figure.first_wait : waited) += seconds_since(waiting);
      auto& batch = *it;
      auto data = batch.data.to(device, /*non_blocking=*/true);
      auto target = batch.target.to(device, true);
      auto valid = batch.valid.to(device, true);
      auto errors = (model.forward(data, batch.table.table) - target).pow(2).sum(-1);
      auto loss = errors.masked_select(valid).mean();
      optimizer.zero_grad();
      loss.backward();
      group.average_gradients(parameters);
      optimizer.step();

      const int64_t frames = batch.valid.sum().item<int64_t>();
      figure.frames += frames;
      figure.padding += batch.valid.numel() - frames;
      losses.push_back(loss.item<double>());
      ++figure.batches;
      const double elapsed = seconds_since(start);
      progress.update(figure.batches, losses.back(), figure.batches / elapsed,
                      figure.frames / elapsed);
    }
    figure.seconds = seconds_since(start);
    figure.wait_share = waited / (figure.seconds - figure.first_wait);
    std::tie(figure.first_loss, figure.last_loss) = ends_of(losses);
    figures.push_back(figure);
  }
  return figures;
}

// The loop DDP users write first: the sequences dealt out to the ranks in turn (as
// DistributedSampler does, equal counts per rank), each stepped through frame by frame with an
// all-reduce per frame. Ranks with fewer frames reach the end of the epoch first and wait there,
// while the others wait in an all-reduce that no other rank will join.
std::vector<EpochFigures> train_naive(const Config& config, const std::vector<int64_t>& lengths,
                                      Model& model, Group& group, const torch::Device& device) {
  RunningSum dataset(lengths, config.seed);
  auto parameters = model.parameters();
  torch::optim::Adam optimizer(parameters, torch::optim::AdamOptions(config.lr));
  auto& gru = *model.native;
  const int64_t per_rank = (static_cast<int64_t>(lengths.size()) + config.world_size - 1) /
                           config.world_size;
  std::vector<EpochFigures> figures;
  for (int64_t epoch = 0; epoch < config.epochs; ++epoch) {
    EpochFigures figure;
    std::vector<double> losses;
    const auto start = Clock::now();
    for (int64_t k = 0; k < per_rank; ++k) {
      // DistributedSampler pads the last round with sequences from the start.
      const auto index = static_cast<size_t>((k * config.world_size + config.rank) %
                                             static_cast<int64_t>(lengths.size()));
      auto example = dataset.get(index);
      auto state = torch::zeros({1, kHidden}, device);
      for (int64_t step = 0; step < lengths[index]; ++step) {
        state = gru.cell(example.data[step].unsqueeze(0).to(device), state.detach());
        auto loss = (gru.head(state) - example.target[step].to(device)).pow(2).mean();
        optimizer.zero_grad();
        loss.backward();
        group.average_gradients(parameters);
        optimizer.step();
        losses.push_back(loss.item<double>());
        ++figure.frames;
      }
      ++figure.batches;
    }
    group.store_barrier("epoch_" + std::to_string(epoch));
    figure.seconds = seconds_since(start);
    std::tie(figure.first_loss, figure.last_loss) = ends_of(losses);
    figures.push_back(figure);
  }
  return figures;
}

int run_rank(const Config& config) {
  torch::set_num_threads(1);  // the ranks share this machine's cores
  // Gradients that decay along long recurrent chains reach denormal floats, which x86 CPUs
  // multiply about 100x slower; treating them as zero changes no result worth keeping.
  at::globalContext().setFlushDenormal(true);
  torch::Device device(config.device == "cuda" ? torch::kCUDA : torch::kCPU);
#ifdef BLOAD_WITH_NCCL
  if (device.is_cuda()) {
    const auto index = static_cast<c10::DeviceIndex>(config.rank % torch::cuda::device_count());
    c10::cuda::set_device(index);
    device = torch::Device(torch::kCUDA, index);
  }
#endif
  auto lengths = bload::read_lengths(config.lengths);
  if (config.sequences > 0 && config.sequences < static_cast<int64_t>(lengths.size()))
    lengths.resize(config.sequences);
  auto model = load_model(config, device);
  Group group(config, device);

  std::vector<EpochFigures> figures;
  try {
    figures = config.loop == "bload" ? train_packed(config, lengths, model, group, device)
                                     : train_naive(config, lengths, model, group, device);
  } catch (const std::exception& error) {
    const auto* c10_error = dynamic_cast<const c10::Error*>(&error);
    std::cerr << "rank " << config.rank << ": stopped after " << group.collectives()
              << " collectives: "
              << (c10_error ? c10_error->what_without_backtrace() : error.what()) << "\n";
    return 3;
  }

  // Every rank's figures, gathered: the batch counts must agree.
  std::vector<double> mine;
  for (const auto& f : figures)
    mine.insert(mine.end(), {f.seconds, f.wait_share, double(f.batches), double(f.frames),
                             double(f.padding), f.first_loss, f.last_loss, f.first_wait});
  auto all = group.gather(mine).view({config.world_size, config.epochs, 8});
  if (config.rank != 0) return 0;
  auto batches = all.select(2, 2);
  bool equal = (batches == batches[0]).all().item<bool>();
  std::ostringstream json;
  json << "{\"loop\": \"" << config.loop << "\", \"model\": \"" << config.model
       << "\", \"policy\": \"" << config.policy << "\", \"backend\": \"" << group.name()
       << "\", \"device\": \"" << device.str() << "\", \"world_size\": " << config.world_size
       << ", \"epochs\": [";
  for (int64_t epoch = 0; epoch < config.epochs; ++epoch) {
    auto e = all.select(1, epoch);  // [world_size, 8]
    const double seconds = e.select(1, 0).max().item<double>();
    const double waited = e.select(1, 1).max().item<double>();
    const double first_wait = e.select(1, 7).max().item<double>();
    const double frames = e.select(1, 3).sum().item<double>();
    const double padding = e.select(1, 4).sum().item<double>();
    const double first = e.select(1, 5).mean().item<double>();
    const double last = e.select(1, 6).mean().item<double>();
    std::ostringstream per_rank;
    for (int64_t rank = 0; rank < config.world_size; ++rank)
      per_rank << (rank ? ", " : "") << e[rank][2].item<int64_t>();
    std::printf(
        "epoch %lld: %.2f s on %lld ranks (%s, %s), batches per rank [%s]%s, padding %.2f%% of "
        "steps, first batch after %.2f s, then loader wait %.2f%% of the steps, loss %.4f -> "
        "%.4f\n",
        static_cast<long long>(epoch), seconds, static_cast<long long>(config.world_size),
        group.name().c_str(), config.policy.c_str(), per_rank.str().c_str(),
        equal ? " (equal)" : " (NOT EQUAL)", 100 * padding / std::max(frames + padding, 1.0),
        first_wait, 100 * waited, first, last);
    json << (epoch ? ", " : "") << "{\"seconds\": " << seconds
         << ", \"first_batch_seconds\": " << first_wait << ", \"loader_wait_share\": " << waited << ", \"batches_per_rank\": [" << per_rank.str() << "], \"frames\": " << frames
         << ", \"padding\": " << padding << ", \"first_loss\": " << first
         << ", \"last_loss\": " << last << "}";
  }
  json << "]}";
  if (config.json) std::printf("%s\n", json.str().c_str());
  std::fflush(stdout);
  return equal ? 0 : 4;
}

}  // namespace

int main(int argc, char** argv) try {
  const Config config = parse(argc, argv);
  return config.rank < 0 ? launch(config, argc, argv) : run_rank(config);
} catch (const c10::Error& error) {
  std::cerr << "error: " << error.what_without_backtrace() << "\n";
  return 1;
} catch (const std::exception& error) {
  std::cerr << "error: " << error.what() << "\n";
  return 1;
}
