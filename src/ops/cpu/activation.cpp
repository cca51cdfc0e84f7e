// CPU reference for ReLU, GELU and dropout. Per-element math is ops/nn_math.h, the code the CUDA
// kernels run, so both backends give identical bits (GELU included: no library tanh/exp).
// Dropout walks Philox blocks, not elements: elements 4g..4g+3 share block offset + g, so a task
// owns whole groups of four and the mask never depends on how the range was split.
#include <algorithm>

#include "ops/activation_stubs.h"
#include "ops/cpu/parallel.h"
#include "ops/nn_math.h"

namespace stoker::ops::cpu {

namespace {
void dropout(const Tensor& out, const Tensor& in, float p, uint64_t seed, uint64_t offset) {
  const float scale = detail::dropout_scale(p);
  visit_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.data());
    const T* x = static_cast<const T*>(in.data());
    const int64_t n = out.numel();
    const int64_t groups = (n + 3) / 4;
    parallel_range(
        groups,
        [&](int64_t gs, int64_t ge) {
          for (int64_t g = gs; g < ge; ++g) {
            const detail::KeepMask4 m =
                detail::dropout_keep4(seed, offset, static_cast<uint64_t>(g), p);
            const int64_t end = std::min<int64_t>(n, 4 * g + 4);
            for (int64_t i = 4 * g; i < end; ++i)
              o[i] = store<T>(m.keep[i - 4 * g] ? detail::mul_rn(load(x[i]), scale) : 0.0f);
          }
        },
        kGrain / 16);  // Philox costs more than a memory pass: smaller tasks
  });
}
}  // namespace

void relu_forward(const Tensor& y, const Tensor& x) {
  map_unary(y, x, [](float v) { return detail::relu(v); });
}

void relu_backward(const Tensor& dx, const Tensor& dy, const Tensor& y) {
  map_binary(dx, dy, y, [](float g, float v) { return detail::relu_grad(g, v); });
}

void gelu_forward(const Tensor& y, const Tensor& x) {
  map_unary(y, x, [](float v) { return detail::gelu(v); });
}

void gelu_backward(const Tensor& dx, const Tensor& dy, const Tensor& x) {
  map_binary(dx, dy, x, [](float g, float v) { return detail::mul_rn(g, detail::gelu_grad(v)); });
}

void dropout_forward(const Tensor& y, const Tensor& x, float p, uint64_t seed, uint64_t offset) {
  dropout(y, x, p, seed, offset);
}

void dropout_backward(const Tensor& dx, const Tensor& dy, float p, uint64_t seed, uint64_t offset) {
  dropout(dx, dy, p, seed, offset);
}

STOKER_REGISTER_STUB(relu_forward, relu_forward);
STOKER_REGISTER_STUB(relu_backward, relu_backward);
STOKER_REGISTER_STUB(gelu_forward, gelu_forward);
STOKER_REGISTER_STUB(gelu_backward, gelu_backward);
STOKER_REGISTER_STUB(dropout_forward, dropout_forward);
STOKER_REGISTER_STUB(dropout_backward, dropout_backward);

}  // namespace stoker::ops::cpu
