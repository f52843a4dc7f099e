// torch.ops.bload's Autograd kernels. `pack` and `unpack` carry gradients: a piece's gradient is
// the gradient of the steps it was copied to, and back. pack's backward is the operator
// `pack_backward`, so that AOT autograd traces it through its Meta kernel. The table operators'
// fallthroughs are registered beside them (step_tables.cpp, batch_tables.cpp).

#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "bload/ops.h"
#include "checks.h"

namespace bload::ops {
namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class PackFunction : public torch::autograd::Function<PackFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, at::TensorList sequences, const Tensor& table,
                        int64_t blocks, int64_t t_max, const at::Scalar& padding_value) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    std::vector<c10::SymInt> steps;
    // A 0-d sequence has no steps to save; pack below refuses it, naming it.
    for (const auto& sequence : sequences) {
      steps.push_back(sequence.dim() > 0 ? sequence.sym_size(0) : c10::SymInt(0));
    }
    ctx->saved_data["table"] = table;
    ctx->saved_data["steps"] = c10::SymIntArrayRef(steps);
    return bload::pack(sequences.vec(), table, blocks, t_max, padding_value);
  }

  // One gradient per sequence, then none for the other arguments.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto out = call_pack_backward(grads[0], ctx->saved_data["table"].toTensor(),
                                  ctx->saved_data["steps"].toSymIntVector());
    out.resize(out.size() + 4);  // table, blocks, t_max, padding_value
    return out;
  }
};

class UnpackFunction : public torch::autograd::Function<UnpackFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const Tensor& packed, const Tensor& table) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->saved_data["table"] = table;
    ctx->saved_data["shape"] = packed.sizes().vec();
    return bload::unpack(packed, table);
  }

  // The packed tensor's gradient: each piece's gradient at its steps, zero on padding.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto shape = ctx->saved_data["shape"].toIntVector();
    auto host = host_table(ctx->saved_data["table"].toTensor());
    auto cells = host.accessor<int64_t, 2>();
    Tensor packed_grad;
    for (int64_t row = 0; row < host.size(0); ++row) {
      if (!grads[row].defined()) continue;  // a piece the loss did not use
      if (!packed_grad.defined()) packed_grad = at::zeros(shape, grads[row].options());
      steps_in_block(packed_grad, cells[row]).copy_(grads[row]);
    }
    return {packed_grad, Tensor()};
  }
};

Tensor pack(at::TensorList sequences, const Tensor& table, int64_t blocks, int64_t t_max,
            const at::Scalar& padding_value) {
  // A loader's pack records nothing: straight to the kernel (the autograd node's saved steps
  // cost as much as copying a small batch).
  const bool recording =
      at::GradMode::is_enabled() &&
      std::any_of(sequences.begin(), sequences.end(),
                  [](const Tensor& sequence) { return sequence.requires_grad(); });
  if (!recording) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return bload::pack(sequences.vec(), table, blocks, t_max, padding_value);
  }
  return PackFunction::apply(sequences, table, blocks, t_max, padding_value);
}

// Like torch's out= functions, pack_into records no gradient: it refuses arguments that need
// one rather than leave them without.
void pack_into(Tensor& out, at::TensorList sequences, const Tensor& table,
               const at::Scalar& padding_value) {
  const bool recording = at::GradMode::is_enabled();
  for (size_t i = 0; i < sequences.size(); ++i) {
    TORCH_CHECK(!(recording && sequences[i].requires_grad()), "sequences[", i,
                "] requires grad: pack with out= records no gradient (call pack without out=)");
  }
  TORCH_CHECK(!(recording && out.requires_grad()),
              "out requires grad: pack with out= records no gradient (call pack without out=)");
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    call_pack_into(out, sequences, table, padding_value);
  }
  torch::autograd::impl::bump_version(out);  // as in-place and out= operators do
}

std::vector<Tensor> unpack(const Tensor& packed, const Tensor& table) {
  return UnpackFunction::apply(packed, table);
}

}  // namespace

TORCH_LIBRARY_IMPL(bload, Autograd, m) {
  m.impl("pack", &pack);
  m.impl("pack_into", &pack_into);
  m.impl("unpack", &unpack);
}

}  // namespace bload::ops
