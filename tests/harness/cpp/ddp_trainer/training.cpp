// The training loops: bload's packed loop, the padded loop it is measured against, and the naive
// per-sequence loop (on tests/support's RunningSum data set), and the model's loading. The one
// file of the trainer that includes <torch/torch.h>.
#include "training.h"

#include <bload/bload.h>
#include <bload/nn/packed_gru.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <optional>
#include <string>
#include <tuple>

#include "checkpoint.h"
#include "padded_sampler.h"
#include "running_sum.h"  // tests/support

namespace trainer {

namespace {

constexpr int64_t kHidden = 64, kOutputs = 1;
using bload_test::RunningSum;  // tests/support/running_sum.h: the data set's definition

}  // namespace

// The model either way: the C++ module or a TorchScript one.
class Model {
 public:
  bload::nn::PackedGRU native{nullptr};
  torch::jit::Module script;

  torch::Tensor forward(const torch::Tensor& data, const torch::Tensor& table) {
    if (native) return native->forward(data, table);
    return script.forward({data, table}).toTensor();
  }

  // A batch of the lanes policy (see bload::nn::PackedGRUImpl::forward_lanes): the outputs, and
  // the rows' final state.
  std::pair<torch::Tensor, torch::Tensor> forward_lanes(const torch::Tensor& data,
                                                        const torch::Tensor& table,
                                                        const torch::Tensor& carry,
                                                        const torch::Tensor& state) {
    if (native) return native->forward_lanes(data, table, carry, state);
    const auto outputs = script.run_method("forward_lanes", data, table, carry, state).toTuple();
    return {outputs->elements().at(0).toTensor(), outputs->elements().at(1).toTensor()};
  }

  // Whether the model carries a state from batch to batch (forward_lanes): not an attention one.
  bool recurrent() const { return native || script.find_method("forward_lanes").has_value(); }

  // The size of the recurrent state of one row.
  int64_t hidden() const { return native ? native->hidden() : script.attr("hidden").toInt(); }

  std::vector<torch::Tensor> parameters() {
    if (native) return native->parameters();
    std::vector<torch::Tensor> parameters;
    for (const auto& parameter : script.parameters()) parameters.push_back(parameter);
    return parameters;
  }
};

namespace {

// Every rank resumes at the same point (the checkpoint's epoch and batch, or the beginning), or
// none trains: a rank that found no checkpoint (DIR not shared between machines) would otherwise
// train other batches in step with the rest.
void check_resume_points(Group& group, bload::BlockSampler& trained) {
  const auto points = group.gather(torch::tensor({trained.epoch(), trained.position()}));
  auto point = [&](int64_t rank) {
    const int64_t epoch = points[rank][0].item<int64_t>(), batch = points[rank][1].item<int64_t>();
    return epoch < 0 ? std::string("the beginning")
                     : "epoch " + std::to_string(epoch) + " batch " + std::to_string(batch);
  };
  std::string points_named;
  bool differ = false;
  for (int64_t rank = 0; rank < points.size(0); ++rank) {
    differ = differ || !points[rank].equal(points[0]);
    points_named += (rank ? ", rank " : "rank ") + std::to_string(rank) + " at " + point(rank);
  }
  TORCH_CHECK(!differ, "ranks resume at different points: ", points_named,
              " (every rank reads --checkpoint's directory: on several machines, a shared one)");
}

// The mean squared error over the batch's real steps. Rounding can leave a rank a batch of
// padding only: no step to average, a loss of 0 (and zero gradients) rather than 0/0.
torch::Tensor mean_over_valid(const torch::Tensor& outputs, const torch::Tensor& target,
                              const torch::Tensor& valid) {
  auto errors = (outputs - target).pow(2).sum(-1);
  return errors.masked_select(valid).sum() / valid.sum().clamp_min(1);
}

// Counts a trained batch, of loss `loss`, into `figure` and `losses`.
void count_batch(EpochFigures& figure, std::vector<double>& losses, const bload::PackedBatch& batch,
                 const torch::Tensor& loss) {
  const int64_t frames = batch.valid.sum().item<int64_t>();
  figure.frames += frames;
  figure.padding += batch.valid.numel() - frames;
  figure.sequential_steps += batch.valid.size(1);
  losses.push_back(loss.item<double>());
  ++figure.batches;
}

}  // namespace

std::shared_ptr<Model> load_model(const Config& config, const c10::Device& device) {
  auto model = std::make_shared<Model>();
  if (config.model == "cpp") {
    torch::manual_seed(config.seed);  // the same initial weights on every rank
    model->native = bload::nn::PackedGRU(bload_test::kRunningSumFeatures, kHidden, kOutputs);
    model->native->to(device);
  } else {
    try {
      model->script = torch::jit::load(config.model, device);
    } catch (const c10::Error& error) {
      TORCH_CHECK(false, "--model = \"", config.model,
                  "\": expected cpp or a TorchScript file "
                  "(torch.jit.save), and it would not load: ",
                  error.what_without_backtrace());
    }
    model->script.train();
  }
  return model;
}

std::vector<int64_t> read_run_lengths(const Config& config) {
  std::vector<int64_t> lengths;
  if (config.store.empty()) {
    lengths = bload::read_lengths(config.lengths);
  } else {  // the store's own lengths, from its offsets
    const auto stored = bload::SequenceStore(config.store).lengths();
    lengths.assign(stored.data_ptr<int64_t>(), stored.data_ptr<int64_t>() + stored.numel());
  }
  if (config.sequences > 0 && config.sequences < static_cast<int64_t>(lengths.size()))
    lengths.resize(config.sequences);
  return lengths;
}

bload::Options plan_options(const Config& config, bool pin_memory) {
  return bload::Options(config.t_max)
      .blocks_per_batch(config.blocks_per_batch)
      .world_size(config.world_size)
      .rank(std::max<int64_t>(config.rank, 0))
      .seed(config.seed)
      .policy(config.policy)
      .pin_memory(pin_memory);
}

// The packed loop over `dataset`: RunningSum's generated sequences, or a SequenceStore's.
template <typename Dataset>
std::vector<EpochFigures> train_packed_from(const Config& config,
                                            const std::vector<int64_t>& lengths, Dataset dataset,
                                            Model& model, Group& group, const c10::Device& device) {
  const auto options = plan_options(config, device.is_cuda());
  bload::BlockSampler sampler(lengths, options);
  // The batches trained, one next() per trained batch: the loader's copy of `sampler` runs ahead
  // of the training (it prefetches), so checkpoints take their position from this one.
  bload::BlockSampler trained(sampler.planner(), config.rank);
  auto parameters = model.parameters();
  torch::optim::Adam optimizer(parameters, torch::optim::AdamOptions(config.lr));
  // Lanes: every lane's recurrent state as a checkpoint holds it, when resuming one.
  at::Tensor lane_states;
  const bool resumed = config.resume && load_checkpoint(config.checkpoint, parameters, optimizer,
                                                        {&sampler, &trained}, &lane_states);
  if (config.resume) check_resume_points(group, trained);
  // Lanes: this rank's lanes' states, kept by bload from batch to batch (row j of rank r is lane
  // r * B + j all epoch long), detached at batch boundaries; every lane's in checkpoints.
  std::optional<bload::LaneState> lane_state;
  auto epochs = sampler.epoch_handle(), trained_epochs = trained.epoch_handle();
  auto loader = torch::data::make_data_loader(  // a copy of `sampler`, as loaded
      bload::BlockDataset(std::move(dataset), options), sampler,
      torch::data::DataLoaderOptions().workers(config.workers));
  StepLog log(config);

  std::vector<EpochFigures> figures;
  const int64_t first_epoch = resumed ? trained.epoch() : 0;
  for (int64_t epoch = first_epoch; epoch < config.epochs; ++epoch) {
    if (!resumed || epoch != first_epoch) {  // else the first reset() resumes the checkpoint's
      epochs.set_epoch(epoch);
      trained_epochs.set_epoch(epoch);
    }
    trained.reset();
    const auto& plan = trained.plan();
    const bool lanes = plan.carries_state();  // the core says which policies carry state
    if (lanes && !lane_state) {
      TORCH_CHECK(model.recurrent(), "--policy = lanes with --model = \"", config.model,
                  "\": expected a recurrent model (a forward_lanes method, as the GRU's); an "
                  "attention model carries no state from batch to batch: use another policy");
      lane_state.emplace(trained, std::vector<int64_t>{model.hidden()},
                         at::TensorOptions().device(device));
      // A resumed lanes epoch goes on from every lane's checkpointed state (the sampler's load
      // kept the lane count; LaneState checks the count and shape).
      if (resumed && epoch == first_epoch) {
        TORCH_CHECK(lane_states.defined(), config.checkpoint,
                    ": no lanes' state: expected every lane's, from a lanes run");
        lane_state->load(lane_states);
      }
    }
    // Before the first batch: every rank plans this same epoch, or every rank stops here.
    group.check_agreement(plan, trained.planner(), trained.rank());
    EpochFigures figure;
    figure.epoch = epoch;
    figure.first_batch = trained.position();
    if (epoch == first_epoch) log.start(plan.position(figure.first_batch));
    Progress progress(config.rank == 0, plan.batches_per_rank() - figure.first_batch);
    std::vector<double> losses;
    const auto start = Clock::now();
    auto waiting = Clock::now();
    double waited = 0;
    for (auto it = loader->begin(); it != loader->end(); waiting = Clock::now(), ++it) {
      // begin() and ++it wait for the next batch; begin() also starts the workers.
      (figure.batches == 0 ? figure.first_wait : waited) += seconds_since(waiting);
      auto& batch = *it;
      const int64_t index = trained.position();
      const auto request = trained.next();
      TORCH_CHECK(request && request->table.equal(batch.table), "rank ", config.rank,
                  ": the loader's batch ", index, " of epoch ", epoch, " is not the plan's");
      auto data = batch.data.to(device, /*non_blocking=*/true);
      auto target = batch.target.to(device, true);
      auto valid = batch.valid.to(device, true);
      torch::Tensor outputs;
      if (lanes) {  // each row goes on from its lane's state where the batch carries it
        auto carry = batch.carry.to(device, true);
        torch::Tensor final_state;
        std::tie(outputs, final_state) =
            model.forward_lanes(data, batch.table, carry, lane_state->initial(batch));
        lane_state->update(batch, final_state);  // detached: gradients stop at the batch's end
      } else {
        outputs = model.forward(data, batch.table);
      }
      auto loss = mean_over_valid(outputs, target, valid);
      optimizer.zero_grad();
      loss.backward();
      log.write(epoch, index, batch.table);  // before the all-reduce: see checkpoint.h
      group.average_gradients(parameters);
      optimizer.step();
      if (config.checkpoint_every > 0 && trained.position() % config.checkpoint_every == 0) {
        // Every rank's lanes, in lane order (a collective: every rank gathers).
        const auto all_lanes =
            lanes ? lane_state->gathered([&](const at::Tensor& mine) { return group.gather(mine); })
                  : at::Tensor();
        if (config.rank == 0)
          save_checkpoint(config.checkpoint, parameters, optimizer, trained, all_lanes);
      }

      count_batch(figure, losses, batch, loss);
      const double elapsed = seconds_since(start);
      progress.update(figure.batches, losses.back(), figure.batches / elapsed,
                      figure.frames / elapsed);
    }
    figure.seconds = seconds_since(start);
    const double after_first = figure.seconds - figure.first_wait;
    figure.wait_share = after_first > 0 ? waited / after_first : 0;
    std::tie(figure.first_loss, figure.last_loss) = ends_of(losses);
    figures.push_back(figure);
  }
  return figures;
}

std::vector<EpochFigures> train_packed(const Config& config, const std::vector<int64_t>& lengths,
                                       Model& model, Group& group, const c10::Device& device) {
  // --store: the sequences of a sequence store (docs/data.md), read by ranges of its mapping.
  if (!config.store.empty())
    return train_packed_from(config, lengths, bload::SequenceStore(config.store), model, group,
                             device);
  return train_packed_from(config, lengths, RunningSum(lengths, config.seed), model, group, device);
}

std::vector<EpochFigures> train_padded(const Config& config, const std::vector<int64_t>& lengths,
                                       Model& model, Group& group, const c10::Device& device) {
  auto parameters = model.parameters();
  torch::optim::Adam optimizer(parameters, torch::optim::AdamOptions(config.lr));
  const auto options = plan_options(config, device.is_cuda());  // the padding values
  std::vector<EpochFigures> figures;
  for (int64_t epoch = 0; epoch < config.epochs; ++epoch) {
    PaddedSampler sampler(lengths, config.blocks_per_batch, config.world_size, config.rank,
                          config.seed, epoch);
    Progress progress(config.rank == 0, sampler.batches());
    auto loader = torch::data::make_data_loader(
        bload::BlockDataset(RunningSum(lengths, config.seed), options), std::move(sampler),
        torch::data::DataLoaderOptions().workers(config.workers));
    EpochFigures figure;
    figure.epoch = epoch;
    std::vector<double> losses;
    const auto start = Clock::now();
    for (auto& batch : *loader) {
      auto valid = batch.valid.to(device, /*non_blocking=*/true);
      auto outputs = model.forward(batch.data.to(device, true), batch.table);
      auto loss = mean_over_valid(outputs, batch.target.to(device, true), valid);
      optimizer.zero_grad();
      loss.backward();
      group.average_gradients(parameters);
      optimizer.step();
      count_batch(figure, losses, batch, loss);
      const double elapsed = seconds_since(start);
      progress.update(figure.batches, losses.back(), figure.batches / elapsed,
                      figure.frames / elapsed);
    }
    figure.seconds = seconds_since(start);
    // Batch by batch the longest of the ranks' t_max, not this rank's own.
    figure.sequential_steps = PaddedSampler::sequential_steps(
        lengths, config.blocks_per_batch, config.world_size, config.seed, epoch);
    std::tie(figure.first_loss, figure.last_loss) = ends_of(losses);
    figures.push_back(figure);
  }
  return figures;
}

// The sequences are dealt out to the ranks in turn (as DistributedSampler does, equal counts per
// rank), each stepped through frame by frame with an all-reduce per frame. Ranks with fewer frames
// reach the end of the epoch first and wait there, while the others wait in an all-reduce that no
// other rank will join.
std::vector<EpochFigures> train_naive(const Config& config, const std::vector<int64_t>& lengths,
                                      Model& model, Group& group, const c10::Device& device) {
  RunningSum dataset(lengths, config.seed);
  auto parameters = model.parameters();
  torch::optim::Adam optimizer(parameters, torch::optim::AdamOptions(config.lr));
  auto& gru = *model.native;
  const int64_t per_rank =
      (static_cast<int64_t>(lengths.size()) + config.world_size - 1) / config.world_size;
  std::vector<EpochFigures> figures;
  for (int64_t epoch = 0; epoch < config.epochs; ++epoch) {
    EpochFigures figure;
    figure.epoch = epoch;
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

}  // namespace trainer
