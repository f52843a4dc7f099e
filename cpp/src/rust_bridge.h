#pragma once
// The C++ side of the cxx bridge, for libbload's own sources only (never installed): the
// generated declarations of the Rust core's functions, the rethrow of Rust errors as c10::Error
// (so C++ callers catch torch's error type and Python sees a RuntimeError with the Rust message),
// and tensors' memory seen as the slices the bridge takes.

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include "bload-cxx/src/lib.rs.h"
#include "rust/cxx.h"

namespace bload {

// Calls into Rust, rethrowing its errors as c10::Error.
template <typename Call>
auto rethrowing(Call&& call) -> decltype(call()) {
  try {
    return call();
  } catch (const ::rust::Error& error) {
    TORCH_CHECK(false, error.what());
  }
}

// A contiguous CPU tensor's elements, read-only or writable.
template <typename T>
rust::Slice<const T> elements(const at::Tensor& tensor) {
  return rust::Slice<const T>(tensor.const_data_ptr<T>(), static_cast<size_t>(tensor.numel()));
}

template <typename T>
rust::Slice<T> mutable_elements(at::Tensor& tensor) {
  return rust::Slice<T>(tensor.mutable_data_ptr<T>(), static_cast<size_t>(tensor.numel()));
}

}  // namespace bload
