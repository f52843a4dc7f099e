// The launcher: a TCPStore for the ranks to meet at, then this binary once per rank, and the first
// rank to fail stopping the others.
#include "launcher.h"

#include "bload/planner.h"
#include "training.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

extern char** environ;

namespace trainer {

namespace {

// Stops and reaps the ranks started so far.
void stop_all(const std::vector<pid_t>& ranks) {
  for (pid_t rank : ranks) kill(rank, SIGTERM);
  for (pid_t rank : ranks) waitpid(rank, nullptr, 0);
}

}  // namespace

int launch(const Config& config, int argc, char** argv) {
  // What every rank would refuse (a world size the data cannot fill, a bad t_max, a lengths file
  // that does not read) is refused here once, before any process is started.
  if (config.loop == "bload") bload::Planner(read_run_lengths(config), plan_options(config, false));

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
      std::cerr << "could not start rank " << rank << ": " << std::strerror(error)
                << ": stopping the other ranks\n";
      stop_all(ranks);
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

}  // namespace trainer
