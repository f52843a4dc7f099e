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

#include "item_pool_state.h"

#include <cmath>

namespace bload {

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
                  ", threw: ", State::message_of(std::current_exception()));
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
                    ", threw: ", State::message_of(std::current_exception()));
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
