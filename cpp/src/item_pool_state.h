// ItemPoolRun's state (item_pool.cpp, whose top comment says how the pool works): the pass's
// batches and reads, the bounds' counts, and the pool's threads, which start the reads, pick them
// and make them. The callers' side, take(), is in item_pool.cpp.

#pragma once

#include "bload/item_pool.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>
#include <unordered_set>

namespace bload {

struct ItemPoolRun::State {
  // What an item threw, as its message.
  static std::string message_of(const std::exception_ptr& thrown) {
    try {
      std::rethrow_exception(thrown);
    } catch (const c10::Error& error) {
      return error.what_without_backtrace();
    } catch (const std::exception& error) {
      return error.what();
    } catch (...) {
      return "something that is not a std::exception (throw a std::exception to give a message)";
    }
  }

  static int64_t bytes_of(const torch::data::Example<>& value) {
    int64_t bytes = 0;
    for (const auto* tensor : {&value.data, &value.target}) {
      if (tensor->defined()) bytes += static_cast<int64_t>(tensor->nbytes());
    }
    return bytes;
  }

  // A read and what became of it (nested, as the file's anonymous namespace would give this class
  // fields of internal linkage).
  enum class Stage { kWaiting, kQueued, kReading, kDone, kDropped };

  struct Task {
    ItemRead read;
    int64_t batch = 0;
    size_t position = 0;      // in its batch's reads
    double cost = 0;          // ItemPool's cost of it (0 without one)
    uint64_t generation = 0;  // the threads' generation it was started in
    bool released = false;    // counted no more (its batch was skipped)
    Stage stage = Stage::kWaiting;
    torch::data::Example<> value;
    std::optional<std::string> error;
    int64_t bytes = 0;
  };
  using TaskPtr = std::shared_ptr<Task>;

  ItemPool pool;
  std::function<Reader()> make_reader;

  std::mutex mutex;
  std::condition_variable work;  // the threads wait for a queued read
  std::condition_variable done;  // callers wait for their items
  uint64_t generation = 0;
  std::vector<std::thread> threads;  // of the current generation

  // The pass served: its batches registered and not taken (by index), those taken, its end
  // (the last batch + 1) once in reach, and where an item threw (batch, message).
  std::optional<int64_t> pass;
  std::map<int64_t, std::vector<TaskPtr>> batches;
  std::unordered_set<int64_t> taken;
  std::unordered_set<int64_t> claimed;  // being prepared by a request, without the lock
  uint64_t restarts = 0;                // passes started over
  std::optional<int64_t> end;
  std::optional<std::pair<int64_t, std::string>> failed;
  // Reads not started, in plan order (batch, position); those started and not picked by a
  // thread, in the order they started; the started not yet taken and the bytes of the read ones.
  std::map<std::pair<int64_t, size_t>, TaskPtr> waiting;
  std::deque<TaskPtr> queue;
  int64_t started = 0;
  int64_t ready_bytes = 0;
  int64_t callers = 0;    // threads in take()
  int64_t kept_back = 0;  // of them, those waiting for an item not started

  State(ItemPool options, std::function<Reader()> reader)
      : pool(std::move(options)), make_reader(std::move(reader)) {}

  // Starts reads in plan order as the bounds allow, and threads for them. Holding the lock.
  void admit() {
    if (failed) return;
    const auto max_bytes = pool.max_bytes();
    while (!waiting.empty() && started < pool.max_items() &&
           !(max_bytes && ready_bytes > *max_bytes)) {
      auto task = waiting.begin()->second;
      waiting.erase(waiting.begin());
      task->stage = Stage::kQueued;
      task->generation = generation;
      queue.push_back(std::move(task));
      ++started;
      work.notify_one();
    }
    while (static_cast<int64_t>(threads.size()) < std::min(pool.workers(), started)) {
      threads.emplace_back([this, mine = generation] { serve(mine); });
    }
  }

  // Ends the current generation of threads, dropping every read not picked by one (their
  // callers make them); returns the threads, to be joined without the lock. Holding the lock.
  std::vector<std::thread> stop() {
    ++generation;
    for (auto& [key, task] : waiting) task->stage = Stage::kDropped;
    for (auto& task : queue) task->stage = Stage::kDropped;
    waiting.clear();
    queue.clear();
    started = 0;
    ready_bytes = 0;
    work.notify_all();
    done.notify_all();
    return std::move(threads);
  }

  // Whether `task` is in the bound's counts.
  bool counted(const Task& task) const { return task.generation == generation && !task.released; }

  // Releases the batches before `index` that no caller has asked for (see the top of the file);
  // false where there is none. Holding the lock.
  bool release_skipped(int64_t index) {
    bool any = false;
    for (auto& [batch, tasks] : batches) {
      if (batch >= index) break;
      for (size_t position = 0; position < tasks.size(); ++position) {
        auto& task = *tasks[position];
        if (task.stage == Stage::kWaiting) {
          waiting.erase({batch, position});
          task.stage = Stage::kDropped;
        } else if (task.stage == Stage::kQueued) {
          queue.erase(std::find(queue.begin(), queue.end(), tasks[position]));
          task.stage = Stage::kDropped;
          --started;
        } else if ((task.stage == Stage::kReading || task.stage == Stage::kDone) && counted(task)) {
          --started;
          if (task.stage == Stage::kDone) ready_bytes -= task.bytes;
          task.released = true;
        } else {
          continue;
        }
        any = true;
      }
    }
    if (any) admit();
    return any;
  }

  // The queued read a free thread takes: the first started, or with a cost the costliest (ties
  // in plan order). Holding the lock; the queue holds at most max_items reads.
  TaskPtr take_next() {
    auto next = queue.begin();
    if (pool.cost()) {
      const auto costlier = [](const TaskPtr& a, const TaskPtr& b) {
        if (a->cost != b->cost) return a->cost > b->cost;
        return std::tie(a->batch, a->position) < std::tie(b->batch, b->position);
      };
      next = std::min_element(queue.begin(), queue.end(), costlier);
    }
    auto task = std::move(*next);
    queue.erase(next);
    return task;
  }

  // A pool thread: reads queued items until its generation ends.
  void serve(uint64_t mine) {
    std::optional<Reader> reader;
    std::optional<std::string> no_reader;
    try {
      reader = make_reader();
    } catch (...) {  // each item it picks then fails with this
      no_reader =
          "copying the dataset for a pool thread threw: " + message_of(std::current_exception());
    }
    std::unique_lock<std::mutex> lock(mutex);
    while (true) {
      work.wait(lock, [&] { return generation != mine || !queue.empty(); });
      if (generation != mine) return;
      auto task = take_next();
      task->stage = Stage::kReading;
      lock.unlock();
      torch::data::Example<> value;
      std::optional<std::string> error = no_reader;
      if (!error) {
        try {
          value = (*reader)(task->read);
        } catch (...) {
          error = message_of(std::current_exception());
        }
      }
      const int64_t bytes = error ? 0 : bytes_of(value);
      lock.lock();
      task->value = std::move(value);
      task->error = std::move(error);
      task->bytes = bytes;
      task->stage = Stage::kDone;
      if (counted(*task)) ready_bytes += bytes;
      done.notify_all();
    }
  }
};

}  // namespace bload
