// bload_state_interop: the C++ half of the test that a sampler state saved by Python loads into
// the C++ sampler and the other way round (tests/python/test_state.py runs it).
//
//   bload_state_interop LENGTHS T_MAX WORLD_SIZE RANK BLOCKS_PER_BATCH IN OUT
//
// Loads IN (a state torch.save wrote from Python's BlockSampler.state_dict()) into a C++
// BlockSampler of those options, prints the cells of its next batch's table on one line, and
// saves its state after that batch to OUT with torch::pickle_save (torch.load reads it). Errors
// go to stderr with exit status 1.

#include <torch/serialize.h>

#include <fstream>
#include <iostream>
#include <iterator>

#include "bload/bload.h"

int main(int argc, char** argv) {
  if (argc != 8) {
    std::cerr
        << "usage: bload_state_interop LENGTHS T_MAX WORLD_SIZE RANK BLOCKS_PER_BATCH IN OUT\n";
    return 2;
  }
  try {
    const auto options = bload::Options(std::stoll(argv[2]))
                             .world_size(std::stoll(argv[3]))
                             .rank(std::stoll(argv[4]))
                             .blocks_per_batch(std::stoll(argv[5]));
    bload::BlockSampler sampler(bload::read_lengths(argv[1]), options);
    std::ifstream in(argv[6], std::ios::binary);
    const std::vector<char> bytes{std::istreambuf_iterator<char>(in), {}};
    const auto state = torch::pickle_load(bytes).toGenericDict();
    sampler.load_state_dict(state);
    sampler.reset();  // goes on from the loaded position
    const auto next = sampler.next();
    if (!next) throw std::runtime_error("the loaded epoch has no batch left");
    const auto cells = next->table.flatten();
    for (int64_t i = 0; i < cells.numel(); ++i)
      std::cout << (i ? " " : "") << cells[i].item<int64_t>();
    std::cout << "\n";
    const auto saved = torch::pickle_save(sampler.state_dict());
    std::ofstream out(argv[7], std::ios::binary);
    out.write(saved.data(), static_cast<std::streamsize>(saved.size()));
    return 0;
  } catch (const std::exception& error) {
    std::cerr << error.what() << "\n";
    return 1;
  }
}
