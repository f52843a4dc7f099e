#pragma once
// How the C++ entry points of bload/ops.h reach an operator: through torch's dispatcher, by its
// schema's name, so that a call from C++ takes the same kernel, autograd and device dispatch as
// torch.ops.bload from Python. Each caller keeps the handle in a function-local static: the
// lookup by name is made once.

#include <ATen/core/dispatch/Dispatcher.h>

namespace bload::ops {

template <typename Signature>
auto typed_op(const char* name, const char* overload = "") {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload).typed<Signature>();
}

}  // namespace bload::ops
