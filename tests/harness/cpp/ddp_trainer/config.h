// The command line: the trainer's Config, its usage text, and the parsing of argv into a Config.
#pragma once

#include <cstdint>
#include <string>

namespace trainer {

// The most ranks the launcher starts on this machine, each a process of its own.
inline constexpr int64_t kMaxLocalRanks = 1024;

struct Config {
  int64_t world_size = 2;
  int64_t rank = -1;  // -1: this process is the launcher
  // Where the ranks meet: a TCPStore at master_addr:port, the launcher's on 127.0.0.1 (--port),
  // or torchrun's MASTER_ADDR:MASTER_PORT, which this process hosts when store_server.
  std::string master_addr = "127.0.0.1";
  int64_t port = 0;
  bool store_server = false;
  bool torchrun = false;    // the rank, world size and store came from torchrun's environment
  int64_t local_rank = 0;   // this rank's index on its machine: its GPU
  int64_t restart = 0;      // torchrun's TORCHELASTIC_RESTART_COUNT: keys of a restart are its own
  int64_t store_rank = -1;  // the rank hosting the store; -1: the launcher or torchrun's agent
  std::string lengths = BLOAD_DEFAULT_LENGTHS;
  int64_t sequences = 0;
  std::string store;  // a sequence store to read the sequences from (the bload loop); "": generate
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
  double heartbeat_window = 30;  // seconds: a rank silent or stuck this long is named, and all stop
  bool json = false;
  std::string checkpoint;        // the directory of rank 0's checkpoint
  int64_t checkpoint_every = 0;  // batches of an epoch between checkpoints; 0: none
  bool resume = false;           // from the checkpoint, where there is one
  std::string step_log;          // rank R appends a line per trained piece to step_log + ".R"
};

// The options of argv, checked (std::invalid_argument names a bad one), and without --rank
// torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK) when RANK is
// set; --help prints the usage and exits.
Config parse(int argc, char** argv);

}  // namespace trainer
