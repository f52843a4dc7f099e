#pragma once
// bload::ItemPool: threads that read the items of the coming batches ahead of a BlockDataset, in
// plan order, so that a slow item (a long clip to decode, a cold read) started early is ready
// when its batch is due, and every batch is still exactly the plan's (docs/read_ahead.md, "Slow
// items: the item pool"). The C++ face of Python's bload.ItemPool, with the same rule.
//
//   bload::BlockDataset dataset(clips, options, bload::ItemPool(8).max_items(32));

#include <torch/data/example.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bload/export.h"
#include "bload/planner.h"

namespace bload {

// An item pool's default items a worker (max_items is that many times its workers by default)
// and its most workers: the core's ITEMS_PER_WORKER and MAX_POOL_WORKERS.
BLOAD_API int64_t default_items_per_worker();
BLOAD_API int64_t max_pool_workers();

// The options of a BlockDataset's item pool, set in libtorch's builder style; each checked where
// it is set (a c10::Error naming it, its value and what was expected).
class BLOAD_API ItemPool {
 public:
  // `workers` threads read items at once: from 1 to max_pool_workers().
  explicit ItemPool(int64_t workers);

  int64_t workers() const { return workers_; }
  // The most items started and not yet taken by their batch (memory: at most that many read
  // items are held): at least 1; by default default_items_per_worker() a worker. It caps how far
  // ahead the pool reads, as does the sampler's read_ahead (the batches in reach).
  ItemPool& max_items(int64_t value);
  int64_t max_items() const;
  // Optionally, no item starts while the read items not yet taken hold more than this many bytes
  // of tensors (data and target; those being read may add theirs on top): at least 1.
  ItemPool& max_bytes(int64_t value);
  std::optional<int64_t> max_bytes() const { return max_bytes_; }
  // Optionally, what an item read costs, from its sequence's index and the piece it reads (for a
  // read of the whole sequence, the piece of its first row in the batch: offset 0 and its length
  // where the sequence is not split), e.g. its length: a free thread takes the costliest read
  // started first (ties in plan order), so slow items get a head start. It orders work only: the
  // reads started and the batches are the same. Called in the thread asking for a batch, before
  // the pool's lock; what it throws ends that request, naming the call. Python's `cost`.
  using Cost = std::function<double(size_t index, int64_t offset, int64_t length)>;
  ItemPool& cost(Cost value);
  const Cost& cost() const { return cost_; }

 private:
  int64_t workers_;
  std::optional<int64_t> max_items_;
  std::optional<int64_t> max_bytes_;
  Cost cost_;
};

// One call of a BlockDataset's inner dataset: get(index) for a whole sequence, or
// get_range(index, offset, length) for one piece. A whole read keeps its first row's piece in
// offset and length (what ItemPool's cost is given).
struct BLOAD_API ItemRead {
  size_t index = 0;
  int64_t offset = 0;
  int64_t length = 0;
  bool whole = true;
  // The call as errors name it: "get(17)" or "get_range(17, 0, 230)".
  std::string call() const;
};

// The reads a BlockDataset makes for a block table, in the order it makes them: with `ranges`
// (the inner dataset reads ranges) one get_range a row; else one get a sequence, at its first
// row; for a table of no row, get(0) (for the output's trailing shape and dtype).
BLOAD_API std::vector<ItemRead> item_reads(const at::Tensor& table, bool ranges);
// The data and target of each row of `table` from the values of its item_reads, in order (rows
// of one sequence read whole share its tensors).
BLOAD_API std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>> examples_by_row(
    const at::Tensor& table, bool ranges, std::vector<torch::data::Example<>> values);

// A running item pool, shared by a BlockDataset and its copies (one per DataLoader worker
// thread), which take requests in no set order: each item is read once, by the pool's threads,
// each reading from its own copy of the inner dataset (as torch's DataLoader gives each worker
// its own). Made by BlockDataset; its threads are joined when the last copy is gone.
class BLOAD_API ItemPoolRun {
 public:
  using Reader = std::function<torch::data::Example<>(const ItemRead&)>;
  // `make_reader` makes one thread's reader (over a copy of the inner dataset of its own); it is
  // called in that thread, several at once.
  ItemPoolRun(ItemPool pool, std::function<Reader()> make_reader);
  ~ItemPoolRun();
  ItemPoolRun(const ItemPoolRun&) = delete;
  ItemPoolRun& operator=(const ItemPoolRun&) = delete;

  // The values of `request`'s item_reads(table, ranges), in order, once read; its batches ahead
  // (request.ahead) are registered and their reads started, in plan order, as the bounds allow.
  // A request of another pass, or one of a batch of this pass already taken, starts the pool
  // over at it (joining its threads first). An item that threw is a c10::Error naming the call
  // and the batch, after every thread of the pool has been joined; the pass's later batches are
  // then refused, saying so. Reads the pool dropped (a pass started over, an item threw) are
  // made by `read`, in the caller's thread.
  std::vector<torch::data::Example<>> take(const BatchRequest& request, bool ranges,
                                           const Reader& read);

  const ItemPool& options() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace bload
