// Data-parallel training of a recurrent model on packed blocks of variable-length sequences: a
// user's libtorch training program, written with bload's sampler, dataset adaptor, agreement
// check, lane state and checkpoint calls.
//
//   build/examples/cpp/train                                          # one process
//   torchrun --nproc-per-node 2 --no-python build/examples/cpp/train  # 2 DDP ranks (gloo)
//   build/examples/cpp/train --policy lanes --t-max 32
//   build/examples/cpp/train --model build/packed_gru.pt              # a TorchScript model
//   build/examples/cpp/train --checkpoint run.pt                      # resumes from run.pt
//
// The data are made up: sequence i has 16 features per step and, as target, the scaled running
// sum of its first feature, so the model must carry its state along a sequence.
#include <bload/bload.h>
#include <bload/nn/packed_gru.h>  // the model, which bload ships
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/script.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>

struct RunningSums : torch::data::datasets::Dataset<RunningSums> {
  std::vector<int64_t> lengths;
  explicit RunningSums(std::vector<int64_t> lengths) : lengths(std::move(lengths)) {}
  torch::data::Example<> get(size_t i) override {
    auto features = torch::randn({lengths.at(i), 16}, at::make_generator<at::CPUGeneratorImpl>(i));
    auto steps = torch::arange(1, lengths.at(i) + 1, torch::kFloat).unsqueeze(1);
    return {features, features.slice(1, 0, 1).cumsum(0) / steps.sqrt()};
  }
  std::optional<size_t> size() const override { return lengths.size(); }
};

// Both models, behind one call: bload's C++ module bload::nn::PackedGRU or a TorchScript file.
struct Model {
  bload::nn::PackedGRU module{nullptr};
  torch::jit::Module script;
  std::vector<torch::Tensor> parameters() {
    if (module) return module->parameters();
    std::vector<torch::Tensor> all;
    for (const auto& parameter : script.parameters()) all.push_back(parameter);
    return all;
  }
  std::pair<torch::Tensor, torch::Tensor> lanes(const bload::PackedBatch& batch,
                                                torch::Tensor state) {
    if (module) return module->forward_lanes(batch.data, batch.table, batch.carry, state);
    auto out = script.get_method("forward_lanes")({batch.data, batch.table, batch.carry, state});
    return {out.toTuple()->elements()[0].toTensor(), out.toTuple()->elements()[1].toTensor()};
  }
  torch::Tensor packed(const bload::PackedBatch& batch) {
    if (module) return module->forward(batch.data, batch.table);
    return script.forward({batch.data, batch.table}).toTensor();
  }
};

int main(int argc, char** argv) try {
  std::map<std::string, std::string> flags{
      {"--lengths", "examples/data/action_genome_like.lengths"},
      {"--sequences", "2000"},
      {"--model", "cpp"},
      {"--policy", "best_fit"},
      {"--t-max", "94"},
      {"--blocks-per-batch", "8"},
      {"--epochs", "1"},
      {"--checkpoint", ""}};
  for (int i = 1; i + 1 < argc; i += 2) {
    TORCH_CHECK(
        flags.count(argv[i]), argv[i],
        ": not an option; expected one of --lengths, "
        "--sequences, --model, --policy, --t-max, --blocks-per-batch, --epochs, --checkpoint");
    flags[argv[i]] = argv[i + 1];
  }
  const int64_t t_max = std::stoll(flags["--t-max"]), epochs = std::stoll(flags["--epochs"]);
  const std::string checkpoint = flags["--checkpoint"];

  // Under torchrun, this process is rank RANK of WORLD_SIZE; the ranks meet at MASTER_ADDR:PORT.
  const char* rank_variable = std::getenv("RANK");
  const int rank = rank_variable ? std::atoi(rank_variable) : 0;
  const int world_size = rank_variable ? std::atoi(std::getenv("WORLD_SIZE")) : 1;
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  if (rank_variable) {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<uint16_t>(std::atoi(std::getenv("MASTER_PORT")));
    store_options.isServer = false;  // torchrun's agent hosts it
    auto store = c10::make_intrusive<c10d::TCPStore>(std::getenv("MASTER_ADDR"), store_options);
    auto gloo = c10d::ProcessGroupGloo::Options::create();
    gloo->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, world_size);
    group->setBackend(c10::kCPU, c10d::ProcessGroup::GLOO,
                      c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, gloo));
    group->setDefaultBackend(c10d::ProcessGroup::GLOO);
  }

  auto lengths = bload::read_lengths(flags["--lengths"]);
  lengths.resize(std::min<size_t>(lengths.size(), std::stoull(flags["--sequences"])));
  const bool lanes = flags["--policy"] == "lanes";
  auto options = bload::Options(t_max)
                     .blocks_per_batch(std::stoll(flags["--blocks-per-batch"]))
                     .world_size(world_size)
                     .rank(rank)
                     .policy(flags["--policy"])
                     .split_oversized(!lanes);  // lanes serve long sequences whole
  bload::BlockSampler sampler(lengths, options);
  // The loader keeps a copy of `sampler` that runs ahead (it prefetches): `trained` is advanced
  // once per trained batch, so its state is what a checkpoint holds.
  bload::BlockSampler trained(sampler.planner(), rank);

  torch::manual_seed(0);  // the same initial weights on every rank
  Model model;
  if (flags["--model"] == "cpp") model.module = bload::nn::PackedGRU(16, 64, 1);
  else model.script = torch::jit::load(flags["--model"]);
  auto parameters = model.parameters();
  torch::optim::Adam optimizer(parameters, torch::optim::AdamOptions(1e-2));
  std::optional<bload::LaneState> lane_state;
  if (lanes) lane_state.emplace(trained, std::vector<int64_t>{64});

  bool resumed = false;
  if (!checkpoint.empty() && std::filesystem::exists(checkpoint)) {
    torch::serialize::InputArchive archive;
    archive.load_from(checkpoint);
    for (size_t i = 0; i < parameters.size(); ++i) {
      torch::NoGradGuard no_grad;
      torch::Tensor saved;
      archive.read("parameter" + std::to_string(i), saved);
      parameters[i].copy_(saved);
    }
    torch::serialize::InputArchive optimizer_archive;
    archive.read("optimizer", optimizer_archive);
    optimizer.load(optimizer_archive);
    c10::IValue state;
    archive.read("sampler", state);
    sampler.load_state_dict(state.toGenericDict());  // refuses other lengths or options, by name
    trained.load_state_dict(state.toGenericDict());
    if (lane_state) {
      torch::Tensor every_lane;
      archive.read("lanes", every_lane);
      lane_state->load(every_lane);
    }
    resumed = true;
  }
  // Made after the checkpoint is loaded: the loader keeps a copy of the sampler as it is now.
  auto loader = torch::data::make_data_loader(bload::BlockDataset(RunningSums(lengths), options),
                                              sampler, torch::data::DataLoaderOptions().workers(1));
  std::function<torch::Tensor(const torch::Tensor&)> gather;  // every rank's rows, in rank order
  if (group)
    gather = [&](const torch::Tensor& mine) {
      std::vector<std::vector<torch::Tensor>> all(1);
      for (int r = 0; r < world_size; ++r) all[0].push_back(torch::empty_like(mine));
      std::vector<torch::Tensor> input{mine};
      group->allgather(all, input)->wait();
      return torch::cat(all[0]);
    };

  auto loader_epochs = sampler.epoch_handle(), trained_epochs = trained.epoch_handle();
  for (int64_t epoch = resumed ? trained.epoch() : 0; epoch < epochs; ++epoch) {
    if (!resumed || epoch != trained.epoch()) {  // a resumed epoch goes on where it stood
      loader_epochs.set_epoch(epoch);
      trained_epochs.set_epoch(epoch);
    }
    resumed = false;
    trained.reset();
    // Before the first batch: every rank plans this same epoch, or every rank stops here.
    if (group) bload::check_agreement(*group, trained.plan(), trained.planner(), trained.rank());
    double total = 0;
    int64_t steps = 0, batches = 0;
    for (auto& batch : *loader) {  // every rank gets as many batches, [blocks, t_max, ...] each
      trained.next();
      torch::Tensor outputs, final_state;
      if (lane_state) {  // each row goes on from its lane's state
        std::tie(outputs, final_state) = model.lanes(batch, lane_state->initial(batch));
        lane_state->update(batch, final_state);  // detached: back-propagation stops here
      } else {
        outputs = model.packed(batch);
      }
      auto errors = (outputs - batch.target).pow(2).sum(-1).masked_select(batch.valid);
      auto loss = errors.sum() / std::max<int64_t>(errors.numel(), 1);  // padding only: 0
      optimizer.zero_grad();
      loss.backward();
      for (auto& parameter : parameters) {  // DDP's average of the gradients
        if (!group) break;
        std::vector<torch::Tensor> grad{parameter.grad()};
        group->allreduce(grad)->wait();
        parameter.grad().div_(world_size);
      }
      optimizer.step();
      total += errors.sum().item<double>(), steps += errors.numel(), ++batches;
    }
    if (batches == 0) continue;  // resumed at the end of an epoch
    if (rank == 0)
      std::cout << "epoch " << epoch << ": " << batches << " batches per rank, mean loss "
                << total / std::max<int64_t>(steps, 1) << "\n";
    if (checkpoint.empty()) continue;
    const auto every_lane = lane_state ? lane_state->gathered(gather) : torch::Tensor();
    if (rank != 0) continue;
    torch::serialize::OutputArchive archive, optimizer_archive;
    for (size_t i = 0; i < parameters.size(); ++i)
      archive.write("parameter" + std::to_string(i), parameters[i].detach());
    optimizer.save(optimizer_archive);
    archive.write("optimizer", optimizer_archive);
    archive.write("sampler", c10::IValue(trained.state_dict()));
    if (every_lane.defined()) archive.write("lanes", every_lane);
    archive.save_to(checkpoint + ".partial");
    std::filesystem::rename(checkpoint + ".partial", checkpoint);  // never half a checkpoint
  }
  return 0;
} catch (const c10::Error& error) {
  std::cerr << "error: " << error.what_without_backtrace() << "\n";
  return 1;
}
