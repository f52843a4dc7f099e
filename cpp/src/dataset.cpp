#include "bload/dataset.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/StorageUtils.h>

#include <algorithm>

#include "bload/ops.h"
#include "ops/checks.h"

namespace bload {
namespace {

// [blocks, t_max, ...] like `like`'s steps, pinned when asked and possible, from `buffers` when
// given.
at::Tensor packed_output(const BatchRequest& request, const at::Tensor& like, bool pin_memory,
                         PackBuffers* buffers) {
  std::vector<int64_t> shape{request.blocks, request.t_max};
  auto steps = like.sizes().slice(1);
  shape.insert(shape.end(), steps.begin(), steps.end());
  bool pin = pin_memory && like.is_cpu();
  if (pin && !at::globalContext().hasCUDA()) {
    TORCH_WARN_ONCE(
        "bload: pin_memory is set but no CUDA device is available; packed batches "
        "are allocated in ordinary memory");
    pin = false;
  }
  const auto options = like.options().pinned_memory(pin);
  return buffers ? buffers->take(shape, options) : at::empty(shape, options);
}

// `sequences` packed, or padding alone for a table of no row; `option` names the padding in
// errors (the kernel's own check would call it padding_value, which a dataset user never set).
at::Tensor pack_or_pad(const BatchRequest& request, const std::vector<at::Tensor>& sequences,
                       double padding, const char* option, bool pin_memory, PackBuffers* buffers) {
  TORCH_CHECK(!sequences.empty(), "pack_batch: expected at least one example");
  // The first gives the batch its shape and dtype before the packer checks them all (naming
  // sequences[i], table row i's): an undefined or 0-d one is named here, as the dataset's.
  const auto& first = sequences[0];
  TORCH_CHECK(first.defined() && first.dim() >= 1, "bload::BlockDataset: the ",
              std::string(option).substr(0, std::string(option).find('_')),
              " of the batch's first item: expected a tensor [steps, ...], got ",
              first.defined() ? "a 0-d tensor" : "an undefined tensor");
  ops::check_padding(padding, first.scalar_type(), option);
  auto out = packed_output(request, sequences[0], pin_memory, buffers);
  if (request.table.size(0) == 0) {
    out.fill_(padding);
  } else {
    pack_into(out, sequences, request.table, padding);
  }
  return out;
}

}  // namespace

at::Tensor PackBuffers::take(at::IntArrayRef shape, const at::TensorOptions& options) {
  // The kept tensors never leave: each caller gets a tensor of its own over a kept one's storage.
  // The storage is then held by nothing else exactly when every tensor and view handed out over
  // it is gone, whoever held them (Python keeps a tensor it was handed alive for as long as its
  // object lives, so the handed-out tensor's own count would not say so).
  auto handed_out = [&](const at::Tensor& kept) {
    return at::empty({0}, kept.options()).set_(kept.storage(), 0, shape);
  };
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [tensor, pinned] : kept_) {
    if (tensor.storage().use_count() == 1 && tensor.sizes() == shape &&
        tensor.dtype() == options.dtype() && tensor.device() == options.device() &&
        pinned == options.pinned_memory()) {
      return handed_out(tensor);
    }
  }
  if (kept_.size() == kKept) kept_.erase(kept_.begin());  // the oldest: its holders keep it
  kept_.push_back({at::empty(shape, options), options.pinned_memory()});
  return handed_out(kept_.back().tensor);
}

std::vector<at::Tensor> ReadAhead::claim(const BatchRequest& request) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->pass != request.pass) {  // a new pass over an epoch: nothing of it started
    state_->pass = request.pass;
    state_->started = request.index - 1;
  }
  std::vector<at::Tensor> tables;
  const int64_t last = request.index + static_cast<int64_t>(request.ahead.size());
  for (int64_t index = std::max(state_->started + 1, request.index); index <= last; ++index) {
    tables.push_back(index == request.index ? request.table
                                            : request.ahead[index - request.index - 1]);
  }
  state_->started = std::max(state_->started, last);
  return tables;
}

std::vector<std::string> PackedBatch::field_names() {
#define BLOAD_FIELD_NAME(name) #name,
  return {BLOAD_PACKED_BATCH_FIELDS(BLOAD_FIELD_NAME)};
#undef BLOAD_FIELD_NAME
}

std::vector<std::string> PackedBatch::host_int_names() {
#define BLOAD_HOST_INT_NAME(name) #name,
  return {BLOAD_PACKED_BATCH_HOST_INTS(BLOAD_HOST_INT_NAME)};
#undef BLOAD_HOST_INT_NAME
}

at::Tensor& PackedBatch::field(std::string_view name) {
#define BLOAD_FIELD_OF(field_name) \
  if (name == #field_name) return field_name;
  BLOAD_PACKED_BATCH_FIELDS(BLOAD_FIELD_OF)
#undef BLOAD_FIELD_OF
  TORCH_CHECK(false, "bload::PackedBatch has no field '", name,
              "': the core declares it (src/table/fields.rs); add it to "
              "BLOAD_PACKED_BATCH_FIELDS in bload/dataset.h");
}

// The reads of a table and their values by row: the same with and without an item pool.
std::string ItemRead::call() const {
  if (whole) return "get(" + std::to_string(index) + ")";
  return "get_range(" + std::to_string(index) + ", " + std::to_string(offset) + ", " +
         std::to_string(length) + ")";
}

namespace {

// For each row of a table whose sequences are read whole, the index of its sequence's read: a
// sequence is read at its first row, and the reads are numbered in row order. Found by sorting
// (sequence, row) pairs, with two allocations a table where a hash table of the sequences took
// one a sequence, twice a batch (item_reads', then examples_by_row's): get_batch's time, beside
// the packing of its data (build/pack_bench, docs/benchmarks/packing.md).
std::vector<int64_t> whole_read_of_row(const at::TensorAccessor<int64_t, 2>& cells, int64_t rows) {
  std::vector<std::pair<int64_t, int64_t>> by_sequence(static_cast<size_t>(rows));
  for (int64_t row = 0; row < rows; ++row) by_sequence[row] = {cells[row][kSequence], row};
  std::sort(by_sequence.begin(), by_sequence.end());
  // Each row's sequence's first row (ties sort by row, so a run of one sequence starts there)...
  std::vector<int64_t> read_of_row(static_cast<size_t>(rows));
  for (size_t i = 0; i < by_sequence.size(); ++i) {
    const bool first = i == 0 || by_sequence[i].first != by_sequence[i - 1].first;
    read_of_row[by_sequence[i].second] =
        first ? by_sequence[i].second : read_of_row[by_sequence[i - 1].second];
  }
  // ... then, in row order, the read it names: a first row's is the next; a later row's, that of
  // its first row, already numbered.
  int64_t reads = 0;
  for (int64_t row = 0; row < rows; ++row)
    read_of_row[row] = read_of_row[row] == row ? reads++ : read_of_row[read_of_row[row]];
  return read_of_row;
}

}  // namespace

std::vector<ItemRead> item_reads(const at::Tensor& table, bool ranges) {
  const int64_t rows = table.size(0);
  std::vector<ItemRead> reads;
  if (rows == 0) return {{0, 0, 0, true}};
  auto cells = table.accessor<int64_t, 2>();
  if (ranges) {
    reads.reserve(static_cast<size_t>(rows));
    for (int64_t row = 0; row < rows; ++row) {
      const auto piece = cells[row];
      reads.push_back(
          {static_cast<size_t>(piece[kSequence]), piece[kOffset], piece[kLength], false});
    }
    return reads;
  }
  const auto read_of_row = whole_read_of_row(cells, rows);
  for (int64_t row = 0; row < rows; ++row) {
    if (read_of_row[row] != static_cast<int64_t>(reads.size())) continue;  // read at an earlier row
    const auto piece = cells[row];
    reads.push_back({static_cast<size_t>(piece[kSequence]), piece[kOffset], piece[kLength], true});
  }
  return reads;
}

std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>> examples_by_row(
    const at::Tensor& table, bool ranges, std::vector<torch::data::Example<>> values) {
  std::vector<at::Tensor> data, target;
  const int64_t rows = table.size(0);
  data.reserve(std::max<int64_t>(rows, 1));
  target.reserve(std::max<int64_t>(rows, 1));
  if (ranges || rows == 0) {
    for (auto& value : values) {
      data.push_back(std::move(value.data));
      target.push_back(std::move(value.target));
    }
    return {std::move(data), std::move(target)};
  }
  const auto read_of_row = whole_read_of_row(table.accessor<int64_t, 2>(), rows);
  for (int64_t row = 0; row < rows; ++row) {
    const auto read = static_cast<size_t>(read_of_row[row]);
    TORCH_CHECK(read < values.size(), "examples_by_row: ", values.size(),
                " values for a table of more sequences");
    data.push_back(values[read].data);
    target.push_back(values[read].target);
  }
  return {std::move(data), std::move(target)};
}

at::Tensor PackBuffers::take_shared(at::IntArrayRef shape, at::ScalarType dtype) {
  const auto bytes = c10::multiply_integers(shape) * at::elementSize(dtype);
  auto storage = at::new_shm_fd_storage(bytes);
  return at::empty({0}, dtype).set_(storage, 0, shape);
}

PackedBatch pack_batch(const BatchRequest& request, const std::vector<at::Tensor>& data,
                       const std::vector<at::Tensor>& target, const Options& options,
                       PackBuffers* buffers) {
  const auto& table = request.table;
  PackedBatch batch;
  batch.data = pack_or_pad(request, data, options.data_padding(), "data_padding",
                           options.pin_memory(), buffers);
  batch.target = pack_or_pad(request, target, options.target_padding(), "target_padding",
                             options.pin_memory(), buffers);
  batch.table = table;
  // Every other field, from one call, each to its name in the core's order.
  const auto& names = ops::batch_table_names();
  // The batch_tables operator's kernel, called without the dispatcher (the table is on the host).
  const auto host = ops::host_table(table);
  const auto tables = ops::batch_tables_on_host(host, request.blocks, request.t_max, request.carry,
                                                request.first_lane, options.positions());
  for (size_t i = 0; i < tables.size(); ++i) batch.field(names[i]) = tables[i];
  batch.max_seqlen = max_seqlen(host, request.blocks, request.t_max);
  batch.global = request.global;
  return batch;
}

}  // namespace bload
