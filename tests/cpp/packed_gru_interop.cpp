// bload_packed_gru_interop: the C++ half of the test that bload::nn::PackedGRU and Python's
// bload.nn.PackedGRU, scripted, compute the same outputs from the same weights
// (tests/python/test_nn.py runs it).
//
//   bload_packed_gru_interop MODEL IN OUT
//
// Copies the parameters of MODEL (a scripted bload.nn.PackedGRU that torch.jit.save wrote) into a
// bload::nn::PackedGRU of their shapes and dtype, by name, and runs it on IN, a dict torch.save
// wrote: forward on packed_data and packed_table; forward_lanes on each of the lists lanes_data,
// lanes_tables and carries in turn, from `state` and then from each batch's final state. Saves
// {forward, lanes_outputs (a list), lanes_states (a list)} to OUT with torch::pickle_save
// (torch.load reads it). Errors go to stderr with exit status 1.

#include <bload/nn/packed_gru.h>
#include <torch/script.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <string>

namespace {

// The C++ module with the scripted one's weights: every parameter name of one is the other's.
bload::nn::PackedGRU with_weights_of(const torch::jit::Module& script) {
  std::map<std::string, torch::Tensor> weights;
  for (const auto& parameter : script.named_parameters()) weights[parameter.name] = parameter.value;
  for (const char* name : {"cell.weight_ih", "head.weight"}) {
    if (!weights.count(name)) {
      throw std::runtime_error(std::string("MODEL has no parameter ") + name);
    }
  }
  const auto& input = weights.at("cell.weight_ih");  // [3 hidden, features]
  const auto& head = weights.at("head.weight");      // [outputs, hidden]
  bload::nn::PackedGRU model(input.size(1), head.size(1), head.size(0));
  model->to(input.scalar_type());
  torch::NoGradGuard no_grad;
  auto mine = model->named_parameters();
  if (mine.size() != weights.size()) {
    throw std::runtime_error("MODEL has " + std::to_string(weights.size()) +
                             " parameters, bload::nn::PackedGRU " + std::to_string(mine.size()));
  }
  for (auto& parameter : mine) {
    const auto found = weights.find(parameter.key());
    if (found == weights.end()) {
      throw std::runtime_error("MODEL has no parameter " + parameter.key());
    }
    parameter.value().copy_(found->second);
  }
  return model;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: bload_packed_gru_interop MODEL IN OUT\n";
    return 2;
  }
  try {
    auto model = with_weights_of(torch::jit::load(argv[1]));
    std::ifstream in(argv[2], std::ios::binary);
    const std::vector<char> bytes{std::istreambuf_iterator<char>(in), {}};
    const auto inputs = torch::pickle_load(bytes).toGenericDict();
    auto tensor = [&](const char* name) { return inputs.at(name).toTensor(); };
    auto tensors = [&](const char* name) {  // a Python list unpickles as a list of IValues
      std::vector<torch::Tensor> all;
      for (const auto& item : inputs.at(name).toListRef()) all.push_back(item.toTensor());
      return all;
    };

    torch::NoGradGuard no_grad;
    c10::impl::GenericDict results(c10::StringType::get(), c10::AnyType::get());
    results.insert("forward", model->forward(tensor("packed_data"), tensor("packed_table")));
    const auto data = tensors("lanes_data"), tables = tensors("lanes_tables");
    const auto carries = tensors("carries");
    c10::List<torch::Tensor> outputs, states;
    auto state = tensor("state");
    for (size_t batch = 0; batch < data.size(); ++batch) {
      auto [batch_outputs, final_state] =
          model->forward_lanes(data.at(batch), tables.at(batch), carries.at(batch), state);
      outputs.push_back(batch_outputs);
      states.push_back(final_state);
      state = final_state;
    }
    results.insert("lanes_outputs", outputs);
    results.insert("lanes_states", states);
    const auto saved = torch::pickle_save(results);
    std::ofstream out(argv[3], std::ios::binary);
    out.write(saved.data(), static_cast<std::streamsize>(saved.size()));
    return 0;
  } catch (const std::exception& error) {
    std::cerr << error.what() << "\n";
    return 1;
  }
}
