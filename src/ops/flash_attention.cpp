// Public flash_attention_*: validation, then the CUDA launchers (kernels/flash_attention.cu has
// the algorithm). CUDA only by design: the CPU keeps the math path (ops/attention.h).
#include "ops/flash_attention.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "ops/flash_attention_stubs.h"
#include "ops/validate.h"
#include "stoker/core/error.h"
#include "stoker/core/op_listener.h"

namespace stoker::ops {

namespace {

struct Dims {
  int64_t b, t, h, kv, d;
  int64_t q_width() const { return h * d; }               // out, dout: H D
  int64_t qkv_width() const { return (h + 2 * kv) * d; }  // qkv, dqkv: (H + 2 KV) D
};

bool aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data()) % 16 == 0; }

// Empty when supported. Why each condition: the kernels are compiled for D = 64 and 128 and
// 16-bit mma operands, copy 16-byte chunks (aligned bases; row strides (H + 2 KV) D and H D are
// multiples of 8 elements since D is), and put B*H and the tile count in grid.x / grid.y.
std::string unsupported_reason(const Tensor& qkv, int64_t num_heads, int64_t num_kv_heads) {
  if (!qkv.defined()) return "qkv is undefined";
  if (!qkv.device().is_cuda()) return "qkv is not on a CUDA device";
  if (qkv.dtype() != DType::bf16 && qkv.dtype() != DType::f16) return "qkv is not bf16 or f16";
  if (qkv.rank() != 3) return "qkv is not [B, T, (H + 2 KV) D]";
  const int64_t width = qkv.size(2);
  if (num_heads <= 0 || num_kv_heads <= 0)
    return fmt::format("the head counts H = {}, KV = {} are not positive", num_heads, num_kv_heads);
  if (num_heads % num_kv_heads != 0)
    return fmt::format("num_kv_heads {} does not divide num_heads {}", num_kv_heads, num_heads);
  if (num_heads > width || num_kv_heads > width || width % (num_heads + 2 * num_kv_heads) != 0)
    return fmt::format("qkv's last dim {} is not (H + 2 KV) D = {} D", width,
                       num_heads + 2 * num_kv_heads);
  const int64_t d = width / (num_heads + 2 * num_kv_heads);
  if (d != 64 && d != 128) return fmt::format("the head dim {} is not 64 or 128", d);
  if (qkv.size(1) < 1 || qkv.size(0) < 1) return "B or T is 0";
  if (qkv.size(1) > (int64_t{65535} * 64) || qkv.size(0) * num_heads > 0x7fffffff)
    return "B * H or T exceeds the CUDA grid";
  if (!aligned16(qkv)) return "qkv's data is not 16-byte aligned";
  return {};
}

Dims check_qkv(const char* op, const Tensor& qkv, int64_t num_heads, int64_t num_kv_heads) {
  detail::check_defined(op, "qkv", qkv);
  detail::check_backend(op, qkv);
  const std::string why = unsupported_reason(qkv, num_heads, num_kv_heads);
  STOKER_CHECK_HINT(why.empty(),
                    "check ops::flash_attention_supported first and use ops::attention_forward "
                    "(the math path) otherwise",
                    "ops::", op, ": qkv ", qkv.str(), " with ", num_heads, " query and ",
                    num_kv_heads, " key/value heads is not supported: ", why);
  return {qkv.size(0), qkv.size(1), num_heads, num_kv_heads,
          qkv.size(2) / (num_heads + 2 * num_kv_heads)};
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

// positions: undefined (causal), or [B, T] i32 / i64 on qkv's device.
void check_positions(const char* op, const Tensor& positions, const Tensor& qkv, const Dims& s) {
  if (!positions.defined()) return;
  detail::check_same_device(op, "qkv", qkv, "positions", positions);
  const bool ok = (positions.dtype() == DType::i32 || positions.dtype() == DType::i64) &&
                  positions.shape() == Shape{s.b, s.t};
  STOKER_CHECK_HINT(ok,
                    "pass each token's position in its document (Batch::positions of "
                    "data::SequenceBatches), or no positions for plain causal attention",
                    "ops::", op, ": positions is ", positions.str(), "; expected [", s.b, ", ", s.t,
                    "] i32 or i64");
}

[[maybe_unused]] float softmax_scale(const Dims& s) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.d)));
}

// For the op timing (core/op_listener.h): causal attention does 2·B·T²·H·D FLOPs forward (QKᵀ
// and PV over half the T×T scores of each of the H query heads; the KV heads add none); backward
// 2.5 times that (dV, dP, dQ, dK and the recomputed S). A document mask skips more, but the
// count stays the causal one, so rates compare across masks as inverse times.
[[maybe_unused]] core::OpCost attention_cost(const Dims& s, double times,
                                             std::initializer_list<const Tensor*> tensors) {
  core::OpCost c;
  if (!core::op_listener()) return c;
  c.flops = times * 2.0 * static_cast<double>(s.b) * static_cast<double>(s.t) *
            static_cast<double>(s.t) * static_cast<double>(s.q_width());
  for (const Tensor* t : tensors) c.bytes += static_cast<double>(t->nbytes());
  c.dtype = (*tensors.begin())->dtype();
  return c;
}

}  // namespace

bool flash_attention_supported(const Tensor& qkv, int64_t num_heads, int64_t num_kv_heads) {
  return core::built_with_cuda() && unsupported_reason(qkv, num_heads, num_kv_heads).empty();
}

void flash_attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv,
                             int64_t num_heads, int64_t num_kv_heads, const Tensor& positions) {
  const char* op = "flash_attention_forward";
  const Dims s = check_qkv(op, qkv, num_heads, num_kv_heads);
  check_tensor(op, "out", out, qkv, qkv.dtype(), {s.b, s.t, s.q_width()}, "[B, T, H D]");
  check_tensor(op, "lse", lse, qkv, DType::f32, {s.b, s.h, s.t}, "[B, H, T]");
  check_positions(op, positions, qkv, s);
#if STOKER_WITH_CUDA
  const core::OpScope scope(op, qkv.device(), attention_cost(s, 1.0, {&out, &lse, &qkv}));
  flash_attention_forward_stub.fn(qkv.device())(out, lse, qkv, positions, s.b, s.t, s.h, s.kv, s.d,
                                                softmax_scale(s));
#endif
}

void flash_attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                              const Tensor& out, const Tensor& lse, int64_t num_heads,
                              int64_t num_kv_heads, const Tensor& positions) {
  const char* op = "flash_attention_backward";
  const Dims s = check_qkv(op, qkv, num_heads, num_kv_heads);
  check_tensor(op, "dqkv", dqkv, qkv, qkv.dtype(), {s.b, s.t, s.qkv_width()},
               "[B, T, (H + 2 KV) D]");
  check_tensor(op, "dout", dout, qkv, qkv.dtype(), {s.b, s.t, s.q_width()}, "[B, T, H D]");
  check_tensor(op, "out", out, qkv, qkv.dtype(), {s.b, s.t, s.q_width()},
               "the forward's [B, T, H D]");
  check_tensor(op, "lse", lse, qkv, DType::f32, {s.b, s.h, s.t}, "the forward's [B, H, T]");
  check_positions(op, positions, qkv, s);
#if STOKER_WITH_CUDA
  const Tensor delta = Tensor::empty({s.b, s.h, s.t}, DType::f32, qkv.device());
  const core::OpScope scope(op, qkv.device(),
                            attention_cost(s, 2.5, {&dqkv, &dout, &qkv, &out, &lse}));
  flash_attention_backward_stub.fn(qkv.device())(dqkv, dout, qkv, out, lse, positions, delta, s.b,
                                                 s.t, s.h, s.kv, s.d, softmax_scale(s));
#endif
}

}  // namespace stoker::ops
