#pragma once
// bload::BlockDataset: wraps a map-style dataset of variable-length sequences and returns
// packed batches, for the requests BlockSampler hands out.
//
// The inner dataset's examples are torch::data::Example<> whose data and target are per-step
// tensors [T_i, ...] (T_i the sequence's length in the lengths the sampler was built from). An
// inner dataset that reads ranges (ReadsRanges below) is asked for each piece's steps alone.

#include <torch/data/datasets/base.h>
#include <torch/data/example.h>

#include <c10/util/Exception.h>

#include <concepts>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bload/export.h"
#include "bload/item_pool.h"
#include "bload/planner.h"

namespace bload {

// The packed batch's fields, in the order the Rust core declares them (bload::BatchField in
// src/table/fields.rs, which says what each holds, its dtype and its shape; the ctest
// PackedBatch.HasTheCoresFields checks this list against it, and pack_batch fills the tables by
// the core's names). Every per-step tensor is [blocks, t_max, ...]:
//   data, target   the sequences and targets packed; padding holds Options' data_padding and
//                  target_padding
//   table          int64 [pieces, kTableColumns]: the block table, on the CPU
//   reset          bool: first step of every piece, where recurrent state resets (lanes: only
//                  where a sequence starts; see bload::reset_mask)
//   valid          bool: real steps
//   ends           bool: last step of every sequence
//   carry          bool [blocks]: the row goes on from the state its lane carried from the
//                  previous batch (lanes); keep it there, zero it elsewhere (see LaneState)
//   lanes          int64 [blocks]: the lane of every row
//   segment_ids    int32: piece index inside its block, -1 on padding
//   position_ids   int64: step index inside the sequence, 0 on padding
//   cu_seqlens     int32 [pieces + 1]: varlen offsets
//   indices        int64 [pieces]: dataset index of every piece
//   state_in       int64 [pieces]: the row whose lane state seeds each piece (in cu_seqlens
//                  order), -1 for zeros (docs/state_kernels.md)
//   state_out      int64 [blocks]: the piece whose final state each row's lane keeps for the
//                  next batch, -1 where the lane's state is not read again
//   document_ids   int32: the step's document, pieces and padding runs numbered in flattened
//                  order (every piece and every run of padding an id of its own)
//   cu_seqlens_padded  int32 [2 * pieces + blocks + 1]: the documents' offsets over the
//                  flattened [blocks * t_max] layout, then blocks * t_max repeated
// An X-macro list, which clang-format does not reflow the same way twice: left as written.
// clang-format off
#define BLOAD_PACKED_BATCH_FIELDS(X) \
  X(data) X(target) X(table) X(reset) X(valid) X(ends) X(carry) X(lanes) X(segment_ids) \
      X(position_ids) X(cu_seqlens) X(indices) X(state_in) X(state_out) \
      X(document_ids) X(cu_seqlens_padded)
// clang-format on
// The batch's host integers (the core's fields of shape "int"), in its order:
//   max_seqlen     the longest piece's steps (0 for no piece), computed from the table when the
//                  batch is packed: varlen kernels' max_seqlen with no device tensor read
#define BLOAD_PACKED_BATCH_HOST_INTS(X) X(max_seqlen)

// One packed batch of one rank.
struct BLOAD_API PackedBatch {
#define BLOAD_DECLARE_FIELD(name) at::Tensor name;
  BLOAD_PACKED_BATCH_FIELDS(BLOAD_DECLARE_FIELD)
#undef BLOAD_DECLARE_FIELD
#define BLOAD_DECLARE_HOST_INT(name) int64_t name = 0;
  BLOAD_PACKED_BATCH_HOST_INTS(BLOAD_DECLARE_HOST_INT)
#undef BLOAD_DECLARE_HOST_INT
  // The global batch this one is part of (every rank's batch of the same index), from the plan,
  // not from this batch's table: global.valid real steps and global.pieces pieces over all ranks
  // (Python's batch.global_valid and global_pieces), and its loss scales.
  GlobalBatch global{};

  // What a rank's summed loss is multiplied by so that, once DDP averages the ranks' gradients,
  // they are those of the token mean over the whole global batch, with no collective of its own:
  // world_size / global.valid, or with `shifted` (a causal LM's labels, which skip each piece's
  // first step) world_size / (global.valid - global.pieces); 0 where no target is left.
  double loss_scale(bool shifted = false) const {
    return shifted ? global.shifted_loss_scale : global.loss_scale;
  }

  // The tensor fields' names, in declaration order (host_int_names() gives the others).
  static std::vector<std::string> field_names();
  static std::vector<std::string> host_int_names();
  // The field called `name`; an error (c10::Error) naming it where the batch has none.
  at::Tensor& field(std::string_view name);
};

// Packed batches' data and target tensors, kept to be written again once their batch is gone:
// a loader then writes the same memory batch after batch instead of faulting in fresh pages (the
// C library returns large blocks to the system when they are freed). A buffer is reused only
// when nothing else holds it or a view of it. A copy of the dataset (one per DataLoader worker)
// starts with none.
class BLOAD_API PackBuffers {
 public:
  PackBuffers() = default;
  PackBuffers(const PackBuffers&) {}
  PackBuffers& operator=(const PackBuffers&) { return *this; }

  // A tensor of `shape` and `options`, reused where one is free.
  at::Tensor take(at::IntArrayRef shape, const at::TensorOptions& options);
  // A CPU tensor of `shape` and `dtype` in new shared memory (never reused): a batch packed in
  // a DataLoader worker process goes to the main process without a copy.
  static at::Tensor take_shared(at::IntArrayRef shape, at::ScalarType dtype);

 private:
  static constexpr size_t kKept = 8;  // two tensors of each batch in flight, with prefetching
  std::mutex mutex_;
  struct Kept {
    at::Tensor tensor;
    bool pinned;
  };
  std::vector<Kept> kept_;
};

// Packs one request from the examples of its pieces, one per table row, in row order: each is
// the piece's whole sequence or the piece alone (see bload::pack). When the table has no row (a
// batch of empty blocks: rounding the epoch up to whole global batches can leave fewer empty
// blocks than a global batch holds, more pieces than blocks notwithstanding), `data` and
// `target` hold one example that only gives the trailing shape and dtype. The outputs come from
// `buffers` when given.
BLOAD_API PackedBatch pack_batch(const BatchRequest& request, const std::vector<at::Tensor>& data,
                                 const std::vector<at::Tensor>& target, const Options& options,
                                 PackBuffers* buffers = nullptr);

// An inner dataset that can read part of a sequence: `get_range(index, offset, length)` returns
// steps [offset, offset + length) of example `index`. BlockDataset then reads only the steps it
// packs; other datasets are read whole, once per sequence per batch.
template <typename Inner>
concept ReadsRanges = requires(Inner& inner, size_t index, int64_t offset, int64_t length) {
  { inner.get_range(index, offset, length) } -> std::convertible_to<torch::data::Example<>>;
};

// An inner dataset that starts fetching a piece before it is read: `prefetch(index, offset,
// length)`, called for the pieces of the sampler's next read_ahead batches, in plan order
// (docs/read_ahead.md). It should return at once (start an asynchronous fetch); it never changes
// what a read returns.
template <typename Inner>
concept PrefetchesPieces = requires(Inner& inner, size_t index, int64_t offset, int64_t length) {
  inner.prefetch(index, offset, length);
};
// The same for a whole block table at once, preferred where both are defined:
// bload::SequenceStore advises the kernel of exactly the byte ranges the table reads.
template <typename Inner>
concept PrefetchesTables =
    requires(Inner& inner, const at::Tensor& table) { inner.prefetch_table(table); };

// The batches of a sampler's pass whose reads a BlockDataset and its copies (one per DataLoader
// worker thread, which take requests in no set order) have started, so each is started once.
class BLOAD_API ReadAhead {
 public:
  // The tables of `request` and of its `ahead` that no copy has started, marked started now.
  std::vector<at::Tensor> claim(const BatchRequest& request);

 private:
  struct State {
    std::mutex mutex;
    int64_t pass = -1;
    int64_t started = -1;  // the last batch of the pass started
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

// The inner dataset's items are read in the calling thread, in the order item_reads gives, or,
// given an ItemPool, by the pool's threads ahead of time, in plan order (bload/item_pool.h): the
// same calls, made earlier, and the same batches.
template <typename Inner>
class BlockDataset
    : public torch::data::datasets::BatchDataset<BlockDataset<Inner>, PackedBatch, BatchRequest> {
 public:
  BlockDataset(Inner inner, Options options)
      : inner_(std::move(inner)), options_(std::move(options)) {}
  // With an item pool, shared by this dataset's copies (one per DataLoader worker); each of its
  // threads reads from a copy of `inner` of its own, so `inner` need not allow reads from several
  // threads on one object (only copies, as torch's DataLoader workers need).
  BlockDataset(Inner inner, Options options, ItemPool pool)
      : inner_(std::move(inner)),
        options_(std::move(options)),
        pool_(std::make_shared<ItemPoolRun>(std::move(pool), [prototype = inner_] {
          return ItemPoolRun::Reader(
              [inner = prototype](const ItemRead& item) mutable { return read(inner, item); });
        })) {}

  PackedBatch get_batch(BatchRequest request) override {
    const auto size = inner_.size();
    TORCH_CHECK(request.sequences == 0 || !size || static_cast<int64_t>(*size) == request.sequences,
                "dataset has ", size.value_or(0), " sequences: expected ", request.sequences,
                ", the lengths the sampler plans with");
    if constexpr (PrefetchesTables<Inner> || PrefetchesPieces<Inner>) {
      if (request.read_ahead > 0) {
        for (const auto& table : read_ahead_.claim(request)) start_reads(table);
      }
    }
    std::vector<torch::data::Example<>> items;
    if (pool_) {
      items = pool_->take(request, ReadsRanges<Inner>,
                          [this](const ItemRead& item) { return read(inner_, item); });
    } else {
      const auto reads = item_reads(request.table, ReadsRanges<Inner>);
      items.reserve(reads.size());
      for (const auto& item : reads) items.push_back(read(inner_, item));
    }
    auto [data, target] = examples_by_row(request.table, ReadsRanges<Inner>, std::move(items));
    return pack_batch(request, data, target, options_, &buffers_);
  }

  std::optional<size_t> size() const override { return inner_.size(); }

  Inner& inner() { return inner_; }
  const Options& options() const { return options_; }
  // The item pool's options, or nullptr without one.
  const ItemPool* item_pool() const { return pool_ ? &pool_->options() : nullptr; }

 private:
  // One call of `inner` for `item`, turning what it throws that is not a std::exception into a
  // c10::Error that says so: torch's DataLoader worker passes on a std::exception's message, and
  // nothing at all of anything else.
  static torch::data::Example<> read(Inner& inner, const ItemRead& item) {
    try {
      if constexpr (ReadsRanges<Inner>) {
        if (!item.whole) return inner.get_range(item.index, item.offset, item.length);
      }
      return inner.get(item.index);
    } catch (const std::exception&) {
      throw;
    } catch (...) {
      TORCH_CHECK(false,
                  "the dataset threw something that is not a std::exception while "
                  "reading sequence ",
                  item.index, " (throw a std::exception to give a message)");
    }
  }

  // Starts the reads of a table's pieces through the inner dataset's hook. What the hook throws
  // is reported, never passed over: a read-ahead that fails is a read that will.
  void start_reads(const at::Tensor& table) {
    if constexpr (PrefetchesTables<Inner>) {
      prefetching([] { return std::string("prefetch_table(<a block table>)"); },
                  [&] { inner_.prefetch_table(table); });
    } else {
      auto cells = table.template accessor<int64_t, 2>();
      for (int64_t row = 0; row < table.size(0); ++row) {
        const auto piece = cells[row];
        const auto index = static_cast<size_t>(piece[kSequence]);
        const int64_t offset = piece[kOffset], length = piece[kLength];
        prefetching(
            [&] {
              return "prefetch(" + std::to_string(index) + ", " + std::to_string(offset) + ", " +
                     std::to_string(length) + ")";
            },
            [&] { inner_.prefetch(index, offset, length); });
      }
    }
  }

  template <typename Describe, typename Call>
  static void prefetching(Describe&& describe, Call&& call) {
    try {
      call();
    } catch (const std::exception& error) {
      TORCH_CHECK(false, "bload read-ahead: dataset.", describe(), " threw: ", error.what());
    } catch (...) {
      TORCH_CHECK(false, "bload read-ahead: dataset.", describe(),
                  " threw something that is not a std::exception");
    }
  }

  Inner inner_;
  Options options_;
  PackBuffers buffers_;
  ReadAhead read_ahead_;
  std::shared_ptr<ItemPoolRun> pool_;  // null without an item pool
};

}  // namespace bload
