// bload::SequenceStore: the mapping of a store the Rust core has checked (bload::open_store,
// through the bridge), and tensors over it. See bload/sequence_store.h.

#include "bload/sequence_store.h"

#include <ATen/ops/from_blob.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "bload/planner.h"
#include "rust_bridge.h"

namespace bload {
namespace {

at::ScalarType scalar_type(const std::string& dtype) {
  static const std::pair<const char*, at::ScalarType> kTypes[] = {
      {"bool", at::kBool},     {"uint8", at::kByte},        {"uint16", at::kUInt16},
      {"uint32", at::kUInt32}, {"uint64", at::kUInt64},     {"int8", at::kChar},
      {"int16", at::kShort},   {"int32", at::kInt},         {"int64", at::kLong},
      {"float16", at::kHalf},  {"bfloat16", at::kBFloat16}, {"float32", at::kFloat},
      {"float64", at::kDouble}};
  for (const auto& [name, type] : kTypes) {
    if (dtype == name) return type;
  }
  TORCH_CHECK(false, "store field dtype = ", dtype, ": expected one the core knows");
}

}  // namespace

struct SequenceStore::Impl {
  // One mapped field file (nested, as the file's anonymous namespace would give this class a
  // field of internal linkage).
  struct Field {
    std::string name, path;
    at::ScalarType dtype;
    std::vector<int64_t> shape;
    int64_t step_bytes = 0, bytes = 0;
    int fd = -1;
    void* base = nullptr;
  };

  std::string path;
  std::vector<int64_t> offsets;
  Field data, target;

  ~Impl() {
    for (Field* field : {&data, &target}) {
      if (field->base != nullptr && field->base != MAP_FAILED) munmap(field->base, field->bytes);
      if (field->fd >= 0) close(field->fd);
    }
  }

  // Throws unless the field's file still holds the bytes the header says.
  static void check_size(const Field& field) {
    struct stat status{};
    const bool ok = fstat(field.fd, &status) == 0;
    TORCH_CHECK(ok && status.st_size == field.bytes, field.path, " = ",
                ok ? "a file of " + std::to_string(status.st_size) + " bytes" : "unreadable",
                ": expected ", field.bytes,
                " bytes, as the offsets say (the file changed while mapped)");
  }

  // The store's field `name` opened and mapped into `field`, its size checked.
  static void map_field(Field& field, const ffi::StoreInfo& info, const std::string& name) {
    const ffi::StoreFieldInfo* found = nullptr;
    std::string names;
    for (const auto& candidate : info.fields) {
      names += (names.empty() ? "" : ", ") + std::string(candidate.name);
      if (std::string(candidate.name) == name) found = &candidate;
    }
    TORCH_CHECK(found != nullptr, "store field = ", name, ": expected one of the store's (", names,
                ")");
    field.name = name;
    field.path = std::string(found->path);
    field.dtype = scalar_type(std::string(found->dtype));
    field.shape.assign(found->shape.begin(), found->shape.end());
    field.step_bytes = found->step_bytes;
    field.bytes = found->bytes;
    field.fd = open(field.path.c_str(), O_RDONLY | O_CLOEXEC);
    TORCH_CHECK(field.fd >= 0, field.path, " = unreadable (", std::strerror(errno),
                "): expected a store's field file");
    check_size(field);
    if (field.bytes > 0) {
      // Copy-on-write: writable for torch, private to this process, the file never changed.
      field.base = mmap(nullptr, field.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE, field.fd, 0);
      TORCH_CHECK(field.base != MAP_FAILED, field.path, " = not mapped (", std::strerror(errno),
                  "): expected a file that can be mapped");
    }
  }
};

SequenceStore::SequenceStore(const std::string& path, const std::string& data,
                             const std::string& target) {
  auto info = rethrowing([&] { return ffi::open_sequence_store(path); });
  auto impl = std::make_shared<Impl>();
  impl->path = path;
  impl->offsets.assign(info.offsets.begin(), info.offsets.end());
  Impl::map_field(impl->data, info, data);
  Impl::map_field(impl->target, info, target);
  impl_ = std::move(impl);
}

std::optional<size_t> SequenceStore::size() const { return impl_->offsets.size() - 1; }

at::Tensor SequenceStore::lengths() const {
  const auto& offsets = impl_->offsets;
  auto lengths = at::empty({static_cast<int64_t>(offsets.size()) - 1}, at::kLong);
  auto* out = lengths.data_ptr<int64_t>();
  for (size_t i = 0; i + 1 < offsets.size(); ++i) out[i] = offsets[i + 1] - offsets[i];
  return lengths;
}

torch::data::Example<> SequenceStore::get(size_t index) {
  TORCH_CHECK(index + 1 < impl_->offsets.size(), "index = ", index, ": expected 0 <= index < ",
              impl_->offsets.size() - 1, " (", impl_->path, ")");
  return get_range(index, 0, impl_->offsets[index + 1] - impl_->offsets[index]);
}

torch::data::Example<> SequenceStore::get_range(size_t index, int64_t offset, int64_t length) {
  const auto& offsets = impl_->offsets;
  TORCH_CHECK(index + 1 < offsets.size(), "index = ", index, ": expected 0 <= index < ",
              offsets.size() - 1, " (", impl_->path, ")");
  const int64_t start = offsets[index], steps = offsets[index + 1] - start;
  TORCH_CHECK(offset >= 0 && length >= 0 && offset <= steps - length, "steps [", offset, ", ",
              offset + length, ") of sequence ", index, ": expected a range within its ", steps,
              " steps (", impl_->path, ")");
  auto view = [&](const Impl::Field& field) {
    Impl::check_size(field);
    std::vector<int64_t> shape{length};
    shape.insert(shape.end(), field.shape.begin(), field.shape.end());
    auto* first = static_cast<char*>(field.base) + (start + offset) * field.step_bytes;
    // The tensor keeps the mapping alive, whatever happens to this store.
    auto keep = impl_;
    return at::from_blob(first, shape, [keep](void*) {}, at::TensorOptions().dtype(field.dtype));
  };
  return {view(impl_->data), view(impl_->target)};
}

void SequenceStore::prefetch_table(const at::Tensor& table) const {
  const auto host = table.to(at::kCPU).contiguous();
  TORCH_CHECK(host.scalar_type() == at::kLong && host.dim() == 2 && host.size(1) == kTableColumns,
              "table = a ", host.scalar_type(), " tensor of ", host.dim(),
              " dimensions: expected int64 [pieces, ", kTableColumns, "]");
  static const int64_t page = sysconf(_SC_PAGESIZE);
  const auto& offsets = impl_->offsets;
  for (const Impl::Field* field : {&impl_->data, &impl_->target}) {
    if (field->bytes == 0) continue;
    auto ranges = rethrowing([&] {
      return ffi::store_read_ranges(rust::Slice<const int64_t>(offsets.data(), offsets.size()),
                                    field->step_bytes, field->bytes, elements<int64_t>(host), page);
    });
    for (size_t i = 0; i + 1 < ranges.size(); i += 2) {
      // Advice only: a kernel that declines it changes no read.
      madvise(static_cast<char*>(field->base) + ranges[i], ranges[i + 1], MADV_WILLNEED);
    }
  }
}

}  // namespace bload
