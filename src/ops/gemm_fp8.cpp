// ops::gemm_fp8: validation, the reference composition (the CPU's, and the GPU's where cuBLASLt
// has no FP8 algorithm), and the cuBLASLt path (ops/gemm_fp8.h).
#include "stoker/ops/fp8.h"

#include <atomic>

#include "ops/fp8_stubs.h"
#include "ops/validate.h"
#include "stoker/ops/layout.h"

namespace stoker::ops {

namespace {

void check_operand(const Tensor& c, const Fp8Tensor& x, const char* name) {
  detail::check_defined("gemm_fp8", name, x.codes);
  STOKER_CHECK(
      x.codes.dtype() == DType::u8 && x.codes.rank() == 2 && x.codes.device() == c.device(),
      "ops::gemm_fp8: ", name, ".codes is ", x.codes.str(), "; expected u8 2-D FP8 codes on ",
      c.device().str(), " (ops::fp8_cast_transpose makes them)");
  STOKER_CHECK(x.scale_inv.defined() && x.scale_inv.dtype() == DType::f32 &&
                   x.scale_inv.numel() == 1 && x.scale_inv.device() == c.device(),
               "ops::gemm_fp8: ", name, ".scale_inv is ",
               x.scale_inv.defined() ? x.scale_inv.str() : std::string("undefined"),
               "; expected a rank-0 f32 tensor on ", c.device().str());
}

// The reference: operands dequantized to f32, the product and its epilogue in f32, one rounding
// to C's dtype (what cuBLASLt's FP8 kernels compute, up to the order of the fp32 sums).
void gemm_fp8_reference(const Tensor& c, const Fp8Tensor& a, const Fp8Tensor& b,
                        const GemmOptions& o) {
  const Device device = c.device();
  const Tensor af = Tensor::empty(a.codes.shape(), DType::f32, device);
  const Tensor bf = Tensor::empty(b.codes.shape(), DType::f32, device);
  fp8_dequantize(af, a);
  fp8_dequantize(bf, b);
  if (c.dtype() == DType::f32) return gemm(c, af, bf, o);
  // A half C: the f32 result (and pre-activation) rounded once at the end.
  const Tensor c32 = Tensor::empty(c.shape(), DType::f32, device);
  if (o.beta != 0.0f) cast(c32, c);
  GemmOptions o32 = o;
  Tensor bias32, aux32;
  if (o.bias && o.bias->dtype() != DType::f32) {
    bias32 = Tensor::empty(o.bias->shape(), DType::f32, device);
    cast(bias32, *o.bias);
    o32.bias = &bias32;
  }
  if (o.aux) {
    aux32 = Tensor::empty(o.aux->shape(), DType::f32, device);
    if (o.epilogue == GemmEpilogue::dgelu) cast(aux32, *o.aux);  // read: the pre-activation
    o32.aux = &aux32;
  }
  gemm(c32, af, bf, o32);
  cast(c, c32);
  if (o.epilogue == GemmEpilogue::gelu) cast(*o.aux, aux32);
}

}  // namespace

bool fp8_gemm_supported(Device device) {
  if (device.is_cpu()) return true;
  if (device.index < 0 || device.index >= core::cuda_device_count()) return false;
  // Asked on every FP8 GEMM: the answer is kept per device (0: not asked yet, 1: no, 2: yes).
  constexpr int kMaxDevices = 64;
  static std::atomic<int> known[kMaxDevices] = {};
  if (device.index >= kMaxDevices) return core::compute_capability(device) >= 89;
  int v = known[device.index].load();
  if (v == 0) {
    v = core::compute_capability(device) >= 89 ? 2 : 1;
    known[device.index].store(v);
  }
  return v == 2;
}

void gemm_fp8(const Tensor& c, const Fp8Tensor& a, const Fp8Tensor& b, const GemmOptions& o) {
  detail::check_float("gemm_fp8", "c", c);
  detail::check_backend("gemm_fp8", c);
  check_operand(c, a, "a");
  check_operand(c, b, "b");
  STOKER_CHECK(!o.trans_a && o.trans_b,
               "ops::gemm_fp8: computes C = A B^T with both operands K-major (a [M, K], b [N, "
               "K]); pass trans_a = false and trans_b = true (a transposed operand comes from "
               "ops::fp8_cast_transpose's codes_t)");
  STOKER_CHECK(a.format == Fp8Format::e4m3 || b.format == Fp8Format::e4m3,
               "ops::gemm_fp8: both operands are e5m2, which has no FP8 GEMM; quantize one of "
               "them (the activations or weights) as e4m3");
  STOKER_CHECK(c.rank() == 2, "ops::gemm_fp8: c is ", c.str(), "; expected a 2-D [M, N] tensor");
  const int64_t m = a.codes.size(0), k = a.codes.size(1), n = b.codes.size(0);
  STOKER_CHECK(b.codes.size(1) == k, "ops::gemm_fp8: a is [", m, ", ", k, "] but b is ",
               b.codes.shape(), "; both must be K-major with the same K (b is [N, K])");
  STOKER_CHECK(c.size(0) == m && c.size(1) == n, "ops::gemm_fp8: c is ", c.str(), "; expected [", m,
               ", ", n, "] for a [", m, ", ", k, "] and b [", n, ", ", k, "]");
  if (o.bias) {
    STOKER_CHECK(o.bias->defined() &&
                     (o.bias->dtype() == DType::f32 || o.bias->dtype() == c.dtype()) &&
                     o.bias->rank() == 1 && o.bias->size(0) == n && o.bias->device() == c.device(),
                 "ops::gemm_fp8: bias is ", o.bias->defined() ? o.bias->str() : "undefined",
                 "; expected f32 or ", dtype_name(c.dtype()), " [", n, "] on ", c.device().str());
  }
  detail::check_gemm_epilogue("gemm_fp8", c, o);
  STOKER_CHECK(o.bias_grad == nullptr,
               "ops::gemm_fp8: options.bias_grad is not supported (FP8 operands hold scaled "
               "codes); compute the bias gradient from the half gradient with ops::bias_grad");
  STOKER_CHECK(fp8_gemm_supported(c.device()), "ops::gemm_fp8: ", core::describe_device(c.device()),
               " has no FP8 tensor cores (compute capability 8.9 or newer: Ada, Hopper); train "
               "in bf16 there");
  if (m == 0 || n == 0) return;
#if STOKER_WITH_CUDA
  if (c.device().is_cuda() && k > 0 &&
      detail::profiled_call(
          "gemm_fp8", c.device(), [&] { return gemm_fp8_stub.fn(c.device())(c, a, b, o); }, c,
          a.codes, b.codes, o))
    return;
#endif
  gemm_fp8_reference(c, a, b, o);
}

}  // namespace stoker::ops
