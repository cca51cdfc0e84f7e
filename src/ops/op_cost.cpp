#include "ops/op_cost.h"

#include <cmath>

namespace stoker::ops::detail {

namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

double numel(const Tensor* t) { return t && t->defined() ? static_cast<double>(t->numel()) : 0; }

// FLOPs per element of the op's first tensor (its output, or the tensor it updates), by name.
// Rough by design: what matters for the roofline is that these ops do a few operations per
// byte, far below any GPU's ridge point.
double flops_per_element(std::string_view name) {
  if (starts_with(name, "layernorm") || starts_with(name, "batchnorm")) return 8;
  if (starts_with(name, "add_layernorm")) return 9;  // the residual add, then the layer norm
  if (starts_with(name, "rmsnorm")) return 5;        // square-add, two products, two roundings
  if (starts_with(name, "add_rmsnorm")) return 6;
  if (starts_with(name, "swiglu")) return 10;   // exp, division and products per gate/up pair
  if (starts_with(name, "rope_qkv")) return 3;  // per q/k element; sincos once per token and pair
  if (starts_with(name, "causal_softmax")) return 5;
  if (starts_with(name, "cross_entropy")) return 5;
  if (starts_with(name, "adamw")) return 12;
  if (starts_with(name, "sgd")) return 4;
  if (starts_with(name, "lars")) return 8;  // two squared norms, then SGD's update
  if (starts_with(name, "gelu")) return 10;
  if (starts_with(name, "random")) return 4;
  if (starts_with(name, "fill") || starts_with(name, "cast") || starts_with(name, "convert") ||
      starts_with(name, "heads_from") || starts_with(name, "tokens_from") ||
      starts_with(name, "embedding_forward"))
    return 0;
  return 1;
}

}  // namespace

core::OpCost op_cost(std::string_view name, const CostArgs& args) {
  core::OpCost c;
  for (const Tensor* t : args.tensors)
    if (t->defined()) c.bytes += static_cast<double>(t->nbytes());
  if (args.tensors.empty()) return c;
  const Tensor* first = args.tensors.front();
  if (first->defined()) c.dtype = first->dtype();
  const auto at = [&](size_t i) { return i < args.tensors.size() ? args.tensors[i] : nullptr; };
  if (name == "gemm" || name == "gemm_batched" || name == "gemm_fp8") {
    // c [..., m, n] = op(a) [..., m, k] · op(b): 2·|c|·k.
    const Tensor *cc = at(0), *a = at(1);
    if (cc && a && a->rank() >= 2 && args.gemm) {
      const int64_t k = args.gemm->trans_a ? a->size(-2) : a->size(-1);
      c.flops = 2.0 * numel(cc) * static_cast<double>(k);
      c.dtype = a->dtype();
      c.m = cc->size(-2);
      c.n = cc->size(-1);
      c.k = k;
    }
    // A gelu/dgelu epilogue also writes or reads the pre-activation (ops/gemm.h).
    if (args.gemm && args.gemm->aux && args.gemm->aux->defined())
      c.bytes += static_cast<double>(args.gemm->aux->nbytes());
    return c;
  }
  if (starts_with(name, "conv2d")) {
    // forward (y, x, w): 2·|y|·|w|/K; backward data (dx, dy, w): 2·|dy|·|w|/K; backward filter
    // (dw, dy, x): 2·|dy|·|dw|/K, with K = the filter's output channels (its first dimension);
    // forward with statistics (y, sum, sum_sq, x, w): the forward's.
    const bool stats = name == "conv2d_forward_stats";
    const Tensor* out = name == "conv2d_forward" || stats ? at(0) : at(1);
    const Tensor* w = name == "conv2d_backward_filter" ? at(0) : at(stats ? 4 : 2);
    if (out && w && w->rank() >= 1 && w->size(0) > 0)
      c.flops = 2.0 * numel(out) * numel(w) / static_cast<double>(w->size(0));
    const Tensor* in = at(stats ? 3 : 1);
    if (in && in->defined()) c.dtype = in->dtype();
    return c;
  }
  c.flops = flops_per_element(name) * numel(first);
  return c;
}

}  // namespace stoker::ops::detail
