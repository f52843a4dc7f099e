#pragma once
// bload::SequenceStore: a sequence store (docs/data.md, "The sequence store") read from C++, the
// same files Python's bload.SequenceStore reads, so a C++ trainer packs from them.
//
// The Rust core reads and checks the header, the offsets and the field files' sizes (one checker
// for both languages); this class maps the two fields it serves (copy-on-write, as Python does)
// and hands out tensors over the mapping. It satisfies bload::ReadsRanges: BlockDataset asks it
// for the packed steps alone. Copies share one mapping, which lives as long as any copy or any
// tensor handed out. A field file that shrinks while mapped would raise SIGBUS on its lost
// pages, so every read first checks (fstat) that the files still hold the header's bytes and
// throws c10::Error naming the file otherwise.

#include <torch/data/example.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bload/export.h"

namespace bload {

class BLOAD_API SequenceStore {
 public:
  // The store at `path`, serving its fields `data` and `target` as an example's data and target.
  explicit SequenceStore(const std::string& path, const std::string& data = "data",
                         const std::string& target = "target");

  // Sequences in the store.
  std::optional<size_t> size() const;
  // int64 [sequences]: each sequence's steps, from the offsets.
  at::Tensor lengths() const;
  // Sequence `index`, whole: data [T, ...] and target [T, ...].
  // get() and get_range() hand out views of the store's mapping, not copies: BlockDataset copies
  // each packed step from them once. The mapping is private (copy-on-write) and shared by every
  // copy of this store, so a write into a returned tensor is seen by later reads of this store
  // in this process (never by the files): clone() an example before changing it in place.
  torch::data::Example<> get(size_t index);
  // Steps [offset, offset + length) of sequence `index` (a view, as get()).
  torch::data::Example<> get_range(size_t index, int64_t offset, int64_t length);
  // Advises the kernel (madvise MADV_WILLNEED) that the pieces of a block table (int64
  // [pieces, kTableColumns]) are read next: exactly the byte ranges of the two field files they
  // read (the core's, widened to pages). BlockDataset calls it for the sampler's next
  // read_ahead batches (bload::PrefetchesTables, docs/read_ahead.md); it reads and changes
  // nothing.
  void prefetch_table(const at::Tensor& table) const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

}  // namespace bload
