// The item pool's run (bload/item_pool.h): the reads of the batches in reach, started in plan
// order while fewer than max_items are started and not taken (and, with max_bytes, the read ones
// hold no more than it), read by the pool's threads (in the order started, or with a cost the
// costliest first); each batch's caller takes its items in order as they are read, and packs
// the batch itself.
//
// A generation numbers the pool's threads: stopping them (a new pass, an item that threw, the
// epoch's end, the destructor) starts a new one, and a thread of an older one ends once it has
// read the item it holds, whoever then joins it. The counts (started, ready bytes) are the
// current generation's only.
//
// The bound holds items of batches not yet asked for: a DataLoader asks for each in turn, but a
// loop by hand may skip one. So when every caller waits for an item the bound keeps from starting
// (then the items it counts are all of batches nobody is taking), the last to wait releases the
// batches before its own that nobody has asked for: their items stop counting (those read are
// kept for a late caller, the others are left to it), and the callers' start. Without this, a
// skipped batch would hold its places for good and the loop would wait forever. (A DataLoader
// worker late to ask for its batch may then read some of its items itself: slower, the same.)

#include "bload/item_pool.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>
#include <unordered_set>

namespace bload {

namespace {

// What an item threw, as its message.
std::string message_of(const std::exception_ptr& thrown) {
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

int64_t bytes_of(const torch::data::Example<>& value) {
  int64_t bytes = 0;
  for (const auto* tensor : {&value.data, &value.target}) {
    if (tensor->defined()) bytes += static_cast<int64_t>(tensor->nbytes());
  }
  return bytes;
}

}  // namespace

struct ItemPoolRun::State {
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

ItemPoolRun::ItemPoolRun(ItemPool pool, std::function<Reader()> make_reader)
    : state_(std::make_unique<State>(std::move(pool), std::move(make_reader))) {}

ItemPoolRun::~ItemPoolRun() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    threads = state_->stop();
  }
  for (auto& thread : threads) thread.join();
}

const ItemPool& ItemPoolRun::options() const { return state_->pool; }

std::vector<torch::data::Example<>> ItemPoolRun::take(const BatchRequest& request, bool ranges,
                                                      const Reader& read) {
  auto& state = *state_;
  const int64_t index = request.index;
  const auto describe = [&](const ItemRead& item) {
    return "dataset." + item.call() + ", an item of batch " + std::to_string(index);
  };
  // A read the pool dropped, made here; what it throws is named as the pool's threads' is.
  const auto read_here = [&](const ItemRead& item) {
    try {
      return read(item);
    } catch (...) {
      TORCH_CHECK(false, "bload item pool: ", describe(item),
                  ", threw: ", message_of(std::current_exception()));
    }
  };
  // The reads of a batch (`step` batches after this one), with their costs.
  struct Prepared {
    std::vector<ItemRead> reads;
    std::vector<double> costs;
  };
  const auto prepare = [&](size_t step) {
    Prepared prepared{item_reads(step == 0 ? request.table : request.ahead[step - 1], ranges), {}};
    prepared.costs.assign(prepared.reads.size(), 0.0);
    const auto& cost = state.pool.cost();
    for (size_t at = 0; cost && at < prepared.reads.size(); ++at) {
      const auto& item = prepared.reads[at];
      const auto call = [&] {  // made only for an error: this runs for every read
        return "cost(" + std::to_string(item.index) + ", " + std::to_string(item.offset) + ", " +
               std::to_string(item.length) + "), of an item of batch " +
               std::to_string(index + static_cast<int64_t>(step));
      };
      try {
        prepared.costs[at] = cost(item.index, item.offset, item.length);
      } catch (...) {
        TORCH_CHECK(false, "bload item pool: ", call(),
                    ", threw: ", message_of(std::current_exception()));
      }
      TORCH_CHECK(!std::isnan(prepared.costs[at]), "bload item pool: ", call(),
                  ", is NaN: expected a number (the costliest read is started first)");
    }
    return prepared;
  };
  // Each batch is prepared by the one request that claims it (its own batch, or one ahead that no
  // caller has registered or claimed), so the cost is called once a read: without the lock, as the
  // cost is the user's code. A request whose own batch another claimed waits for it.
  std::unique_lock<std::mutex> lock(state.mutex);
  while (true) {
    if (state.pass != request.pass || state.taken.count(index)) {
      // Another pass (a new epoch, a loop started over, a state loaded), or a batch asked for
      // again: nothing prepared belongs to it.
      auto threads = state.stop();
      state.batches.clear();
      state.taken.clear();
      state.claimed.clear();
      ++state.restarts;
      state.end.reset();
      state.failed.reset();
      state.pass = request.pass;
      lock.unlock();
      for (auto& thread : threads) thread.join();
      lock.lock();
      continue;
    }
    if (state.failed) {
      const auto& [batch, message] = *state.failed;
      TORCH_CHECK(index <= batch, "bload item pool: batch ", index,
                  " is not read: its pass stopped at batch ", batch, ", where ", message);
    }
    std::vector<size_t> mine;  // steps after `index`
    for (size_t step = 0; step <= request.ahead.size(); ++step) {
      const int64_t batch = index + static_cast<int64_t>(step);
      if (!state.batches.count(batch) && !state.taken.count(batch) && !state.claimed.count(batch)) {
        mine.push_back(step);
      }
    }
    if (mine.empty()) {
      if (state.batches.count(index)) break;
      state.done.wait(lock);  // another request prepares this batch
      continue;
    }
    for (size_t step : mine) state.claimed.insert(index + static_cast<int64_t>(step));
    const uint64_t restarts = state.restarts;
    lock.unlock();
    std::vector<Prepared> prepared;
    try {
      for (size_t step : mine) prepared.push_back(prepare(step));
    } catch (...) {
      lock.lock();
      if (state.restarts == restarts) {
        for (size_t step : mine) state.claimed.erase(index + static_cast<int64_t>(step));
      }
      state.done.notify_all();
      throw;
    }
    lock.lock();
    if (state.restarts != restarts) continue;  // the pass started over meanwhile
    for (size_t at = 0; at < mine.size(); ++at) {
      const int64_t batch = index + static_cast<int64_t>(mine[at]);
      state.claimed.erase(batch);
      auto& tasks = state.batches[batch];
      const auto& [reads, costs] = prepared[at];
      for (size_t position = 0; position < reads.size(); ++position) {
        auto task = std::make_shared<State::Task>();
        task->read = reads[position];
        task->batch = batch;
        task->position = position;
        task->cost = costs[position];
        if (state.failed) {
          task->stage = State::Stage::kDropped;  // read by its caller
        } else {
          state.waiting.emplace(std::make_pair(batch, position), task);
        }
        tasks.push_back(std::move(task));
      }
    }
    state.done.notify_all();
  }
  if (request.read_ahead > 0 && static_cast<int64_t>(request.ahead.size()) < request.read_ahead) {
    state.end = index + static_cast<int64_t>(request.ahead.size()) + 1;
  }
  const auto tasks = std::move(state.batches.at(index));
  state.batches.erase(index);
  state.taken.insert(index);
  state.admit();
  ++state.callers;
  struct Leaving {  // however take() ends, with the lock
    std::unique_lock<std::mutex>& lock;
    int64_t& callers;
    std::condition_variable& done;
    ~Leaving() {
      if (!lock.owns_lock()) lock.lock();
      --callers;
      done.notify_all();  // those left may now all be kept back
    }
  } leaving{lock, state.callers, state.done};

  std::vector<torch::data::Example<>> values;
  values.reserve(tasks.size());
  for (const auto& task : tasks) {
    while (task->stage != State::Stage::kDone && task->stage != State::Stage::kDropped) {
      if (task->stage != State::Stage::kWaiting) {
        state.done.wait(lock);
        continue;
      }
      if (++state.kept_back == state.callers && state.release_skipped(index)) {
        --state.kept_back;
        continue;
      }
      state.done.wait(lock);
      --state.kept_back;
    }
    if (task->stage == State::Stage::kDropped) {
      lock.unlock();
      values.push_back(read_here(task->read));
      lock.lock();
      continue;
    }
    if (state.counted(*task)) {
      --state.started;
      state.ready_bytes -= task->bytes;
    }
    if (task->error) {
      // The pass stops at this batch: every thread joined before the error is thrown.
      const auto message = describe(task->read) + ", threw: " + *task->error;
      state.failed = {index, message};
      auto threads = state.stop();
      lock.unlock();
      for (auto& thread : threads) thread.join();
      TORCH_CHECK(false, "bload item pool: ", message);
    }
    values.push_back(std::move(task->value));
    state.admit();
  }
  // The epoch's last batch taken, and every item before it: the threads end with the epoch.
  if (state.end && state.taken.count(*state.end - 1) && state.batches.empty() &&
      state.waiting.empty() && state.started == 0) {
    auto threads = state.stop();
    lock.unlock();
    for (auto& thread : threads) thread.join();
  }
  return values;
}

}  // namespace bload
