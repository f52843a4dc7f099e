// torch.classes.bload.PackBuffers: the C++ dataset's buffer cache (bload::PackBuffers) for
// Python's BlockDataset, so both reuse packed tensors by the one rule (a tensor is taken again
// only when nothing else holds it or a view of it), decided where the reference counts are.
//
//   buffers = torch.classes.bload.PackBuffers()
//   out = buffers.take([blocks, t_max, 3], torch.float32, shared=False)

#include <torch/custom_class.h>

#include "bload/dataset.h"

namespace bload {
namespace {

class ScriptPackBuffers : public torch::CustomClassHolder {
 public:
  // A CPU tensor of `shape` and `dtype`: with `shared`, new shared memory (a DataLoader worker's
  // batch then reaches the main process without a copy), else one of the kept buffers when one
  // is free.
  at::Tensor take(std::vector<int64_t> shape, at::ScalarType dtype, bool shared) {
    if (shared) return PackBuffers::take_shared(shape, dtype);
    return buffers_.take(shape, at::TensorOptions().dtype(dtype));
  }

 private:
  PackBuffers buffers_;
};

}  // namespace

TORCH_LIBRARY_FRAGMENT(bload, m) {
  m.class_<ScriptPackBuffers>("PackBuffers")
      .def(torch::init<>())
      .def("take", &ScriptPackBuffers::take,
           "A CPU tensor of `shape` and `dtype`: new shared memory with `shared`, else a kept "
           "buffer that nothing else holds, or a new one kept",
           {torch::arg("shape"), torch::arg("dtype"), torch::arg("shared") = false})
      // A copy (a DataLoader worker's) starts with no buffer.
      .def_pickle([](const c10::intrusive_ptr<ScriptPackBuffers>&) { return int64_t{0}; },
                  [](int64_t) { return c10::make_intrusive<ScriptPackBuffers>(); });
}

}  // namespace bload
