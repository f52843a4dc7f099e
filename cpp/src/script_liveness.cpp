// torch.classes.bload.Liveness: bload::Liveness for Python (bload.distributed.Liveness wraps it),
// so both languages' trainers run the one watchdog, on C++ threads that need no GIL: a rank's
// main thread may hold it (stuck in Python data loading) while its heartbeat goes on.
#include <torch/custom_class.h>

#include "bload/liveness.h"

namespace bload {
namespace {

class ScriptLiveness : public torch::CustomClassHolder {
 public:
  // `act`: the watchdog reports and ends the process (exit status 3); without it, it only
  // records what it found, for fault().
  ScriptLiveness(const std::string& host, int64_t port, int64_t rank, int64_t world_size,
                 double window, double join_timeout, int64_t store_rank, const std::string& prefix,
                 bool act)
      : liveness_(host, port, rank, world_size,
                  options(window, join_timeout, store_rank, prefix, act)) {}

  void started() { liveness_.started(); }
  void advance() { liveness_.advance(); }
  std::string failed(const std::string& error) { return liveness_.failed(error); }
  void finished() { liveness_.finished(); }
  std::string fault() { return liveness_.fault(); }

 private:
  static std::chrono::milliseconds millis(const char* name, double seconds) {
    TORCH_CHECK(seconds > 0 && seconds < 1e9, name, " = ", seconds,
                ": expected a number of seconds above 0");
    return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  }

  static LivenessOptions options(double window, double join_timeout, int64_t store_rank,
                                 const std::string& prefix, bool act) {
    auto options = LivenessOptions()
                       .window(millis("window", window))
                       .join_timeout(millis("join_timeout", join_timeout))
                       .store_rank(store_rank)
                       .prefix(prefix);
    if (!act) options.on_fault([](const std::string&) {});
    return options;
  }

  Liveness liveness_;
};

}  // namespace

TORCH_LIBRARY_FRAGMENT(bload, m) {
  m.class_<ScriptLiveness>("Liveness")
      .def(torch::init<std::string, int64_t, int64_t, int64_t, double, double, int64_t, std::string,
                       bool>(),
           "Joins the ranks' liveness at the TCPStore host:port: heartbeats and a watchdog",
           {torch::arg("host"), torch::arg("port"), torch::arg("rank"), torch::arg("world_size"),
            torch::arg("window") = 30.0, torch::arg("join_timeout") = 300.0,
            torch::arg("store_rank") = -1, torch::arg("prefix") = "bload/liveness",
            torch::arg("act") = true})
      .def("started", &ScriptLiveness::started, "Ready for the first collective")
      .def("advance", &ScriptLiveness::advance, "Before each batch's collectives")
      .def("failed", &ScriptLiveness::failed,
           "This rank stops on an error of its own: before started(), every rank is told; "
           "after, the other ranks whose heartbeat stopped, or ''")
      .def("finished", &ScriptLiveness::finished, "A clean end")
      .def("fault", &ScriptLiveness::fault, "What the watchdog found, or ''");
}

}  // namespace bload
