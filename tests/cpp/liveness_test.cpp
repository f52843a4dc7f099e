// bload::Liveness in one process: two ranks' liveness at a TCPStore this test hosts, each with an
// on_fault that records instead of ending the process. The trainers' multi-process runs (a rank
// stopped with SIGSTOP, another world size, a start-up failure) are in
// tests/python/test_ddp_watchdog.py.

#include <bload/liveness.h>
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace liveness_test {
namespace {

using namespace std::chrono_literals;

// What one rank's watchdog reported.
struct Faults {
  std::mutex mutex;
  std::string first;
  std::string get() {
    std::lock_guard<std::mutex> lock(mutex);
    return first;
  }
};

std::unique_ptr<bload::Liveness> join(const c10d::TCPStore& store, int64_t rank, int64_t world_size,
                                      Faults& faults) {
  auto options =
      bload::LivenessOptions().window(600ms).on_fault([&faults](const std::string& fault) {
        std::lock_guard<std::mutex> lock(faults.mutex);
        if (faults.first.empty()) faults.first = fault;
      });
  return std::make_unique<bload::Liveness>("127.0.0.1", store.getPort(), rank, world_size, options);
}

c10::intrusive_ptr<c10d::TCPStore> host() {
  c10d::TCPStoreOptions options;
  options.port = 0;
  options.isServer = true;
  options.waitWorkers = false;
  return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
}

// Waits (up to a minute: a hang is a failure, not a measurement) until both have reported.
bool both_report(Faults& zero, Faults& one) {
  const auto until = std::chrono::steady_clock::now() + 60s;
  while ((zero.get().empty() || one.get().empty()) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(20ms);
  return !zero.get().empty() && !one.get().empty();
}

TEST(Liveness, ARankBehindTheOthersIsNamedStuckOnEveryRank) {
  auto store = host();
  Faults zero, one;
  auto rank0 = join(*store, 0, 2, zero);
  auto rank1 = join(*store, 1, 2, one);
  for (auto* rank : {rank0.get(), rank1.get()}) {
    rank->started();
    rank->advance();
  }
  rank0->advance();  // rank 0 reaches batch 2; rank 1 beats on at batch 1
  ASSERT_TRUE(both_report(zero, one)) << zero.get() << " / " << one.get();
  for (auto* faults : {&zero, &one}) {
    EXPECT_EQ(faults->get().rfind("rank 1 stuck: alive, but still at batch 1 for ", 0), 0u)
        << faults->get();
    EXPECT_NE(faults->get().find("while rank 0 is at batch 2"), std::string::npos) << faults->get();
  }
  EXPECT_EQ(rank0->fault(), zero.get());
}

TEST(Liveness, AnotherWorldSizeIsNamedOnEveryRank) {
  auto store = host();
  Faults zero, one;
  auto rank0 = join(*store, 0, 2, zero);
  auto rank1 = join(*store, 1, 3, one);
  ASSERT_TRUE(both_report(zero, one)) << zero.get() << " / " << one.get();
  for (auto* faults : {&zero, &one})
    EXPECT_EQ(
        faults->get().rfind("ranks disagree on the world size: rank 0 has 2, rank 1 has 3", 0), 0u)
        << faults->get();
}

TEST(Liveness, AStartUpFailureIsToldToTheOthersNotReportedByItsOwnWatchdog) {
  auto store = host();
  Faults zero, one;
  auto rank0 = join(*store, 0, 2, zero);
  auto rank1 = join(*store, 1, 2, one);
  EXPECT_EQ(rank1->failed("lengths.txt: line 3: not a length"), "");
  const auto until = std::chrono::steady_clock::now() + 60s;
  while (zero.get().empty() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(20ms);
  EXPECT_EQ(
      zero.get(),
      "rank 1 failed at start-up, before the agreement check: lengths.txt: line 3: not a length");
  EXPECT_EQ(one.get(), "");  // the failing rank reports its own error, not its watchdog
}

TEST(Liveness, BadArgumentsAreNamed) {
  EXPECT_THROW(bload::LivenessOptions().window(10ms), c10::Error);
  try {
    bload::Liveness("127.0.0.1", 1, 2, 2);
    FAIL() << "rank 2 of 2 accepted";
  } catch (const c10::Error& error) {
    EXPECT_NE(
        std::string(error.what_without_backtrace()).find("rank = 2: expected a rank from 0 to 1"),
        std::string::npos);
  }
}

}  // namespace

}  // namespace liveness_test
