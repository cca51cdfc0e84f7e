#include "stoker/ops/gemm.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "ops/gemm_stubs.h"
#include "ops/validate.h"
#include "stoker/ops/activation.h"
#include "stoker/ops/elementwise.h"
#include "stoker/ops/layout.h"

namespace stoker::ops {

namespace {
std::atomic<bool> g_allow_tf32{false};
std::atomic<int> g_autotune{-1};  // -1: not decided yet (reads STOKER_GEMM_AUTOTUNE)
}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow); }
bool allow_tf32() { return g_allow_tf32.load(); }

bool gemm_autotune() {
  int v = g_autotune.load();
  if (v < 0) {
    const char* env = std::getenv("STOKER_GEMM_AUTOTUNE");
    v = (env && std::string(env) == "0") ? 0 : 1;
    g_autotune.store(v);
  }
  return v == 1;
}

void set_gemm_autotune(bool on) { g_autotune.store(on ? 1 : 0); }

double gemm_flops(int64_t m, int64_t n, int64_t k) {
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
}

namespace {
const char* epilogue_name(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::none:
      return "none";
    case GemmEpilogue::gelu:
      return "gelu";
    case GemmEpilogue::dgelu:
      return "dgelu";
  }
  return "?";
}

// The bias-gradient output: f32 [m] on c's device, for the weight-gradient layout (A = dy read
// transposed), beside no other epilogue, and written nowhere the GEMM reads or writes.
void check_bias_grad(const Tensor& c, const Tensor& a, const Tensor& b, const GemmOptions& o,
                     int64_t m) {
  const Tensor& g = *o.bias_grad;
  STOKER_CHECK(g.defined() && g.dtype() == DType::f32 && g.rank() == 1 && g.size(0) == m &&
                   g.device() == c.device(),
               "ops::gemm: options.bias_grad is ", g.defined() ? g.str() : "undefined",
               "; expected f32 [", m, "] on ", c.device().str(), " (one sum per row of op(a))");
  STOKER_CHECK(o.trans_a, "ops::gemm: options.bias_grad needs trans_a: it sums the columns of a ",
               a.str(), " (a = dy [rows, features], as in dW = dy^T x)");
  STOKER_CHECK(o.bias == nullptr && o.epilogue == GemmEpilogue::none,
               "ops::gemm: options.bias_grad ",
               "goes with no bias and no gelu/dgelu epilogue (it is the weight-gradient GEMM's); "
               "drop ",
               o.bias ? "options.bias" : "the epilogue",
               " or compute the bias gradient "
               "with ops::bias_grad");
  // Byte ranges, not storages: a gradient bucket holds dW and the bias gradient side by side.
  const auto overlaps_with = [&](const Tensor& t) {
    const auto* g0 = static_cast<const char*>(g.data());
    const auto* t0 = static_cast<const char*>(t.data());
    return g.numel() > 0 && t.numel() > 0 && g0 < t0 + t.nbytes() && t0 < g0 + g.nbytes();
  };
  const bool overlaps = overlaps_with(c) || overlaps_with(a) || overlaps_with(b);
  STOKER_CHECK(!overlaps,
               "ops::gemm: options.bias_grad shares memory with c, a or b; give it a "
               "tensor of its own");
}

}  // namespace

void detail::check_gemm_epilogue(std::string_view op, const Tensor& c, const GemmOptions& o) {
  if (o.epilogue == GemmEpilogue::none) {
    STOKER_CHECK(o.aux == nullptr, "ops::", op,
                 ": options.aux is set but options.epilogue is none; aux is the "
                 "pre-activation of the gelu/dgelu epilogue (set the epilogue, or drop aux)");
    return;
  }
  const char* e = epilogue_name(o.epilogue);
  STOKER_CHECK(o.aux != nullptr, "ops::", op, ": the ", e, " epilogue needs options.aux, a ",
               dtype_name(c.dtype()), c.shape(), " tensor on ", c.device().str(),
               o.epilogue == GemmEpilogue::gelu ? " that receives the pre-activation"
                                                : " holding the forward's pre-activation");
  const Tensor& aux = *o.aux;
  STOKER_CHECK(aux.defined() && aux.dtype() == c.dtype() && aux.shape() == c.shape() &&
                   aux.device() == c.device(),
               "ops::", op, ": options.aux is ", aux.defined() ? aux.str() : "undefined", "; the ",
               e, " epilogue expects c's dtype, shape and device: ", c.str());
  STOKER_CHECK(c.numel() == 0 || aux.data() != c.data(), "ops::", op,
               ": options.aux is c itself; the ", e,
               " epilogue needs the pre-activation in a tensor of its own");
  STOKER_CHECK(o.beta == 0.0f, "ops::", op, ": the ", e, " epilogue needs beta = 0, got beta ",
               o.beta, " (it cannot accumulate into c)");
  STOKER_CHECK(o.epilogue != GemmEpilogue::dgelu || o.bias == nullptr, "ops::", op,
               ": options.bias is set with the dgelu epilogue; the backward has no bias "
               "to add (compute the bias gradient with ops::bias_grad)");
}
void gemm(const Tensor& c, const Tensor& a, const Tensor& b, const GemmOptions& o) {
  detail::check_float("gemm", "a", a);
  detail::check_float("gemm", "b", b);
  detail::check_float("gemm", "c", c);
  detail::check_backend("gemm", c);
  detail::check_same_device("gemm", "c", c, "a", a);
  detail::check_same_device("gemm", "c", c, "b", b);
  detail::check_same_dtype("gemm", "a", a, "b", b);
  STOKER_CHECK(a.rank() == 2 && b.rank() == 2 && c.rank() == 2,
               "ops::gemm: needs rank-2 tensors, got a ", a.str(), ", b ", b.str(), ", c ", c.str(),
               " (reshape batched inputs to 2-D first)");
  STOKER_CHECK(
      c.dtype() == DType::f32 || c.dtype() == a.dtype(), "ops::gemm: c is ", c.str(),
      " but a/b are ", dtype_name(a.dtype()), "; expected c in f32",
      a.dtype() == DType::f32 ? "" : std::string(" or ") + std::string(dtype_name(a.dtype())));
  const int64_t m = o.trans_a ? a.size(1) : a.size(0);
  const int64_t k = o.trans_a ? a.size(0) : a.size(1);
  const int64_t kb = o.trans_b ? b.size(1) : b.size(0);
  const int64_t n = o.trans_b ? b.size(0) : b.size(1);
  STOKER_CHECK(k == kb, "ops::gemm: inner dimensions differ: op(a) is [", m, ", ", k, "] (a ",
               a.str(), o.trans_a ? ", transposed" : "", ") but op(b) is [", kb, ", ", n, "] (b ",
               b.str(), o.trans_b ? ", transposed" : "", ")");
  if (o.bias) {
    STOKER_CHECK(o.bias->defined() &&
                     (o.bias->dtype() == DType::f32 || o.bias->dtype() == c.dtype()) &&
                     o.bias->rank() == 1 && o.bias->size(0) == n && o.bias->device() == c.device(),
                 "ops::gemm: bias is ", o.bias->defined() ? o.bias->str() : "undefined",
                 "; expected f32 or ", dtype_name(c.dtype()), " [", n, "] on ", c.device().str());
  }
  STOKER_CHECK(c.size(0) == m && c.size(1) == n, "ops::gemm: c is ", c.str(), "; expected [", m,
               ", ", n, "] for op(a) [", m, ", ", k, "] x op(b) [", k, ", ", n, "]");
  detail::check_gemm_epilogue("gemm", c, o);
  if (o.bias_grad) check_bias_grad(c, a, b, o, m);
  if (m == 0) return;
  if (n == 0) {  // no product to compute, but a's sums still exist
    if (o.bias_grad) {
      fill(*o.bias_grad, 0.0);
      if (k > 0) bias_grad(*o.bias_grad, a);
    }
    return;
  }
  if (k == 0) {                                // op(a) op(b) is all zeros
    if (o.bias_grad) fill(*o.bias_grad, 0.0);  // a sum over no rows
    if (o.epilogue == GemmEpilogue::gelu) {    // aux = bias (or 0), C = gelu(aux)
      fill(*o.aux, 0.0);
      if (o.bias && o.bias->dtype() == DType::f32) {
        add_bias(*o.aux, *o.bias);
      } else if (o.bias) {  // add_bias takes an f32 bias
        const Tensor wide = Tensor::empty(o.bias->shape(), DType::f32, o.bias->device());
        cast(wide, *o.bias);
        add_bias(*o.aux, wide);
      }
      return gelu_forward(c, *o.aux);
    }
    if (o.epilogue == GemmEpilogue::dgelu) return fill(c, 0.0);  // 0 * gelu'(aux)
    // C = beta * C, and beta = 0 must not read C
    if (o.beta == 0.0f) return fill(c, 0.0);
    return scale(c, o.beta);
  }
  gemm_stub(c.device(), c, a, b, o);
}

}  // namespace stoker::ops
