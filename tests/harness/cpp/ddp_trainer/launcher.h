// The launcher: a TCPStore for the ranks to meet at, one process per rank, and the first rank to
// fail stopping the others.
#pragma once

#include "config.h"

namespace trainer {

// Runs this binary once per rank (argv plus --rank and --port) and waits for them: 0 when every
// rank succeeded, 1 otherwise.
int launch(const Config& config, int argc, char** argv);

}  // namespace trainer
