// The command line: the trainer's Config, its usage text, and the parsing of argv into a Config.
#pragma once

#include <cstdint>
#include <string>

namespace trainer {

struct Config {
  int64_t world_size = 2;
  int64_t rank = -1;  // -1: this process is the launcher
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

// The options of argv, checked (std::invalid_argument names a bad one); --help prints the usage
// and exits.
Config parse(int argc, char** argv);

}  // namespace trainer
