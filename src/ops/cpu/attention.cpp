// CPU reference of the attention pieces (ops/attention_stubs.h): head permutations and the
// causal softmax forward/backward, one oneTBB task per block of rows, fp32 math with one
// rounding per stored element — what kernels/attention.cu computes, so the GPU tests compare
// the two on random inputs.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/attention_stubs.h"
#include "ops/cpu/parallel.h"

namespace stoker::ops::cpu {

namespace {

// Rows of `width` elements per task: about kGrain elements.
int64_t row_grain(int64_t width) {
  return std::max<int64_t>(1, kGrain / std::max<int64_t>(1, width));
}

// Copies the D-element rows between the token-major [B, T, G, H, D] and the head-major
// [G, B, H, T, D] layouts; `to_heads` picks the direction.
void permute_heads(const Tensor& dst, const Tensor& src, int64_t batch, int64_t seq, int64_t groups,
                   int64_t heads, int64_t head_dim, bool to_heads) {
  const size_t row_bytes = static_cast<size_t>(head_dim) * dtype_size(src.dtype());
  const auto* s = static_cast<const uint8_t*>(src.data());
  auto* d = static_cast<uint8_t*>(dst.data());
  const int64_t rows = batch * seq * groups * heads;
  parallel_range(
      rows,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {  // r indexes the token-major layout
          int64_t q = r;
          const int64_t h = q % heads;
          q /= heads;
          const int64_t g = q % groups;
          q /= groups;
          const int64_t t = q % seq;
          const int64_t b = q / seq;
          const int64_t hr = ((g * batch + b) * heads + h) * seq + t;  // head-major row
          if (to_heads)
            std::memcpy(d + hr * row_bytes, s + r * row_bytes, row_bytes);
          else
            std::memcpy(d + r * row_bytes, s + hr * row_bytes, row_bytes);
        }
      },
      row_grain(head_dim));
}

}  // namespace

void heads_from_tokens(const Tensor& dst, const Tensor& src, int64_t batch, int64_t seq,
                       int64_t groups, int64_t heads, int64_t head_dim) {
  permute_heads(dst, src, batch, seq, groups, heads, head_dim, true);
}

void tokens_from_heads(const Tensor& dst, const Tensor& src, int64_t batch, int64_t seq,
                       int64_t groups, int64_t heads, int64_t head_dim) {
  permute_heads(dst, src, batch, seq, groups, heads, head_dim, false);
}

void causal_softmax_forward(const Tensor& p, const Tensor& s, int64_t seq) {
  const int64_t rows = s.numel() / seq;
  visit_float(s.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(s.data());
    T* out = static_cast<T*>(p.data());
    parallel_range(
        rows,
        [&](int64_t r0, int64_t r1) {
          std::vector<float> e(static_cast<size_t>(seq));
          for (int64_t r = r0; r < r1; ++r) {
            const int64_t n = r % seq + 1;  // row i sees keys 0..i
            const T* x = in + r * seq;
            T* y = out + r * seq;
            float mx = -std::numeric_limits<float>::infinity();
            for (int64_t j = 0; j < n; ++j) mx = std::max(mx, load(x[j]));
            float sum = 0.0f;
            for (int64_t j = 0; j < n; ++j) {
              e[j] = std::exp(load(x[j]) - mx);
              sum += e[j];
            }
            const float inv = 1.0f / sum;
            for (int64_t j = 0; j < n; ++j) y[j] = store<T>(e[j] * inv);
            for (int64_t j = n; j < seq; ++j) y[j] = store<T>(0.0f);
          }
        },
        row_grain(seq));
  });
}

void causal_softmax_backward(const Tensor& ds, const Tensor& dp, const Tensor& p, int64_t seq,
                             float scale) {
  const int64_t rows = p.numel() / seq;
  visit_float(p.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(dp.data());
    const T* pp = static_cast<const T*>(p.data());
    T* out = static_cast<T*>(ds.data());
    parallel_range(
        rows,
        [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r) {
            const int64_t n = r % seq + 1;
            const T* gr = g + r * seq;
            const T* pr = pp + r * seq;
            T* y = out + r * seq;
            float dot = 0.0f;
            for (int64_t j = 0; j < n; ++j) dot += load(gr[j]) * load(pr[j]);
            for (int64_t j = 0; j < n; ++j)
              y[j] = store<T>(load(pr[j]) * (load(gr[j]) - dot) * scale);
            for (int64_t j = n; j < seq; ++j) y[j] = store<T>(0.0f);
          }
        },
        row_grain(seq));
  });
}

STOKER_REGISTER_STUB(heads_from_tokens, heads_from_tokens);
STOKER_REGISTER_STUB(tokens_from_heads, tokens_from_heads);
STOKER_REGISTER_STUB(causal_softmax_forward, causal_softmax_forward);
STOKER_REGISTER_STUB(causal_softmax_backward, causal_softmax_backward);

}  // namespace stoker::ops::cpu
