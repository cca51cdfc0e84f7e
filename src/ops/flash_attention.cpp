// Public flash_attention_*: validation, then the CUDA launchers (kernels/flash_attention.cu has
// the algorithm). CUDA only by design: the CPU keeps the math path (ops/attention.h), which is
// also the reference the fused kernels are tested against.
#include "ops/flash_attention.h"

#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "ops/flash_attention_stubs.h"
#include "ops/validate.h"
#include "stoker/core/error.h"
#include "stoker/core/op_listener.h"

namespace stoker::ops {

namespace {

struct Dims {
  int64_t b, t, h, c;
};

bool aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data()) % 16 == 0; }

// Why each condition: the kernels are compiled for D = 64 and 16-bit mma operands, copy 16-byte
// chunks (aligned bases; row strides 3C and C are multiples of 8 elements since D = 64), and
// put B*H and the tile count in grid.x / grid.y.
const char* unsupported_reason(const Tensor& qkv, int64_t num_heads) {
  if (!qkv.defined()) return "qkv is undefined";
  if (!qkv.device().is_cuda()) return "qkv is not on a CUDA device";
  if (qkv.dtype() != DType::bf16 && qkv.dtype() != DType::f16) return "qkv is not bf16 or f16";
  if (qkv.rank() != 3 || qkv.size(2) % 3 != 0) return "qkv is not [B, T, 3C]";
  const int64_t c = qkv.size(2) / 3;
  if (num_heads <= 0 || c % num_heads != 0) return "C is not divisible by the head count";
  if (c / num_heads != kFlashAttentionHeadDim) return "the head dim C / H is not 64";
  if (qkv.size(1) < 1 || qkv.size(0) < 1) return "B or T is 0";
  if (qkv.size(1) > (int64_t{65535} * 64) || qkv.size(0) * num_heads > 0x7fffffff)
    return "B * H or T exceeds the CUDA grid";
  if (!aligned16(qkv)) return "qkv's data is not 16-byte aligned";
  return nullptr;
}

Dims check_qkv(const char* op, const Tensor& qkv, int64_t num_heads) {
  detail::check_defined(op, "qkv", qkv);
  detail::check_backend(op, qkv);
  const char* why = unsupported_reason(qkv, num_heads);
  STOKER_CHECK_HINT(why == nullptr,
                    "check ops::flash_attention_supported first and use ops::attention_forward "
                    "(the math path) otherwise",
                    "ops::", op, ": qkv ", qkv.str(), " with ", num_heads,
                    " heads is not supported: ", why);
  return {qkv.size(0), qkv.size(1), num_heads, qkv.size(2) / 3};
}

void check_tensor(const char* op, const char* name, const Tensor& t, const Tensor& qkv, DType dtype,
                  const Shape& expected, const char* what) {
  detail::check_defined(op, name, t);
  detail::check_same_device(op, "qkv", qkv, name, t);
  STOKER_CHECK(t.dtype() == dtype && t.shape() == expected, "ops::", op, ": ", name, " is ",
               t.str(), "; expected ", expected, " ", dtype_name(dtype), " (", what, ")");
  STOKER_CHECK(aligned16(t), "ops::", op, ": ", name, " ", t.str(),
               " is not 16-byte aligned; pass a tensor of its own (not a view at an odd offset)");
}

[[maybe_unused]] float softmax_scale() {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(kFlashAttentionHeadDim)));
}

// For the op timing (core/op_listener.h): causal attention does 2·B·T²·C FLOPs forward (QKᵀ and
// PV over half the T×T scores); backward 2.5 times that (dV, dP, dQ, dK and the recomputed S).
[[maybe_unused]] core::OpCost attention_cost(const Dims& s, double times,
                                             std::initializer_list<const Tensor*> tensors) {
  core::OpCost c;
  if (!core::op_listener()) return c;
  c.flops = times * 2.0 * static_cast<double>(s.b) * static_cast<double>(s.t) *
            static_cast<double>(s.t) * static_cast<double>(s.c);
  for (const Tensor* t : tensors) c.bytes += static_cast<double>(t->nbytes());
  c.dtype = (*tensors.begin())->dtype();
  return c;
}

}  // namespace

bool flash_attention_supported(const Tensor& qkv, int64_t num_heads) {
  return core::built_with_cuda() && unsupported_reason(qkv, num_heads) == nullptr;
}

void flash_attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv,
                             int64_t num_heads) {
  const char* op = "flash_attention_forward";
  const Dims s = check_qkv(op, qkv, num_heads);
  check_tensor(op, "out", out, qkv, qkv.dtype(), {s.b, s.t, s.c}, "[B, T, C]");
  check_tensor(op, "lse", lse, qkv, DType::f32, {s.b, s.h, s.t}, "[B, H, T]");
#if STOKER_WITH_CUDA
  const core::OpScope scope(op, qkv.device(), attention_cost(s, 1.0, {&out, &lse, &qkv}));
  flash_attention_forward_stub.fn(qkv.device())(out, lse, qkv, s.b, s.t, s.h, softmax_scale());
#endif
}

void flash_attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                              const Tensor& out, const Tensor& lse, int64_t num_heads) {
  const char* op = "flash_attention_backward";
  const Dims s = check_qkv(op, qkv, num_heads);
  check_tensor(op, "dqkv", dqkv, qkv, qkv.dtype(), {s.b, s.t, 3 * s.c}, "[B, T, 3C]");
  check_tensor(op, "dout", dout, qkv, qkv.dtype(), {s.b, s.t, s.c}, "[B, T, C]");
  check_tensor(op, "out", out, qkv, qkv.dtype(), {s.b, s.t, s.c}, "the forward's [B, T, C]");
  check_tensor(op, "lse", lse, qkv, DType::f32, {s.b, s.h, s.t}, "the forward's [B, H, T]");
#if STOKER_WITH_CUDA
  const Tensor delta = Tensor::empty({s.b, s.h, s.t}, DType::f32, qkv.device());
  const core::OpScope scope(op, qkv.device(),
                            attention_cost(s, 2.5, {&dqkv, &dout, &qkv, &out, &lse}));
  flash_attention_backward_stub.fn(qkv.device())(dqkv, dout, qkv, out, lse, delta, s.b, s.t, s.h,
                                                 softmax_scale());
#endif
}

}  // namespace stoker::ops
