// CPU reference of the attention pieces (ops/attention_stubs.h): head permutations (with the
// grouped-query expansion of the key/value heads and its summing inverse) and the causal softmax
// forward/backward (optionally document-masked), one oneTBB task per block of rows, fp32 math
// with one rounding per stored element — what kernels/attention.cu computes, so the GPU tests
// compare the two on random inputs.
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

// Copies the D-element rows between the token-major [B, T, slots, D] and the head-major
// [G, B, H, T, D] layouts; `to_heads` picks the direction. Rows are enumerated as the
// multi-head token layout [B, T, G, H, D]; with KV < H (to_heads only) several head rows read
// one key/value slot.
void permute_heads(const Tensor& dst, const Tensor& src, int64_t batch, int64_t seq, int64_t groups,
                   int64_t heads, int64_t kv_heads, int64_t head_dim, bool to_heads) {
  const size_t row_bytes = static_cast<size_t>(head_dim) * dtype_size(src.dtype());
  const auto* s = static_cast<const uint8_t*>(src.data());
  auto* d = static_cast<uint8_t*>(dst.data());
  const int64_t rows = batch * seq * groups * heads;
  const int64_t slots = groups == 1 ? heads : heads + 2 * kv_heads;
  const int64_t group_size = heads / kv_heads;
  parallel_range(
      rows,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          int64_t q = r;
          const int64_t h = q % heads;
          q /= heads;
          const int64_t g = q % groups;
          q /= groups;
          const int64_t t = q % seq;
          const int64_t b = q / seq;
          const int64_t slot = g == 0 ? h : heads + (g - 1) * kv_heads + h / group_size;
          const int64_t tr = (b * seq + t) * slots + slot;             // token-major row
          const int64_t hr = ((g * batch + b) * heads + h) * seq + t;  // head-major row
          if (to_heads)
            std::memcpy(d + hr * row_bytes, s + tr * row_bytes, row_bytes);
          else
            std::memcpy(d + tr * row_bytes, s + hr * row_bytes, row_bytes);
        }
      },
      row_grain(head_dim));
}

// tokens_from_heads with KV < H: each token slot of dst [B, T, H + 2 KV, D] from src
// [3, B, H, T, D]; a key/value slot sums its group's rows in fp32 (ascending head order).
void sum_kv_heads(const Tensor& dst, const Tensor& src, int64_t batch, int64_t seq, int64_t heads,
                  int64_t kv_heads, int64_t head_dim) {
  const int64_t slots = heads + 2 * kv_heads, group_size = heads / kv_heads;
  visit_float(src.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(src.data());
    T* out = static_cast<T*>(dst.data());
    parallel_range(
        batch * seq * slots,
        [&](int64_t r0, int64_t r1) {
          std::vector<float> acc(static_cast<size_t>(head_dim));
          for (int64_t r = r0; r < r1; ++r) {
            const int64_t slot = r % slots;
            const int64_t t = r / slots % seq;
            const int64_t b = r / slots / seq;
            // The group of src and its first head: q heads map one to one.
            const int64_t g = slot < heads ? 0 : 1 + (slot - heads) / kv_heads;
            const int64_t h0 = g == 0 ? slot : (slot - heads) % kv_heads * group_size;
            const int64_t n = g == 0 ? 1 : group_size;
            std::fill(acc.begin(), acc.end(), 0.0f);
            for (int64_t h = h0; h < h0 + n; ++h) {
              const T* row = in + (((g * batch + b) * heads + h) * seq + t) * head_dim;
              for (int64_t e = 0; e < head_dim; ++e) acc[e] += load(row[e]);
            }
            T* y = out + r * head_dim;
            for (int64_t e = 0; e < head_dim; ++e) y[e] = store<T>(acc[e]);
          }
        },
        row_grain(head_dim * group_size));
  });
}

// The visible keys of softmax row r (rows ordered [B, H, T]): [start(r), r % seq].
struct KeyWindow {
  const int32_t* pos32 = nullptr;
  const int64_t* pos64 = nullptr;
  int64_t seq, heads;

  KeyWindow(const Tensor& positions, int64_t seq, int64_t heads) : seq(seq), heads(heads) {
    if (!positions.defined()) return;
    if (positions.dtype() == DType::i32)
      pos32 = static_cast<const int32_t*>(positions.data());
    else
      pos64 = static_cast<const int64_t*>(positions.data());
  }
  int64_t start(int64_t r) const {
    if (pos32 == nullptr && pos64 == nullptr) return 0;
    const int64_t i = r % seq;
    const int64_t token = r / (heads * seq) * seq + i;
    const int64_t pos = pos32 != nullptr ? pos32[token] : pos64[token];
    return i - std::clamp<int64_t>(pos, 0, i);
  }
};

}  // namespace

void heads_from_tokens(const Tensor& dst, const Tensor& src, int64_t batch, int64_t seq,
                       int64_t groups, int64_t heads, int64_t kv_heads, int64_t head_dim) {
  permute_heads(dst, src, batch, seq, groups, heads, kv_heads, head_dim, true);
}

void tokens_from_heads(const Tensor& dst, const Tensor& src, int64_t batch, int64_t seq,
                       int64_t groups, int64_t heads, int64_t kv_heads, int64_t head_dim) {
  if (groups == 3 && kv_heads < heads)
    sum_kv_heads(dst, src, batch, seq, heads, kv_heads, head_dim);
  else
    permute_heads(dst, src, batch, seq, groups, heads, heads, head_dim, false);
}

void causal_softmax_forward(const Tensor& p, const Tensor& s, int64_t seq, const Tensor& positions,
                            int64_t heads) {
  const int64_t rows = s.numel() / seq;
  const KeyWindow window(positions, seq, heads);
  visit_float(s.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(s.data());
    T* out = static_cast<T*>(p.data());
    parallel_range(
        rows,
        [&](int64_t r0, int64_t r1) {
          std::vector<float> e(static_cast<size_t>(seq));
          for (int64_t r = r0; r < r1; ++r) {
            const int64_t n = r % seq + 1;  // row i sees keys start..i
            const int64_t start = window.start(r);
            const T* x = in + r * seq;
            T* y = out + r * seq;
            float mx = -std::numeric_limits<float>::infinity();
            for (int64_t j = start; j < n; ++j) mx = std::max(mx, load(x[j]));
            float sum = 0.0f;
            for (int64_t j = start; j < n; ++j) {
              e[j] = std::exp(load(x[j]) - mx);
              sum += e[j];
            }
            const float inv = 1.0f / sum;
            for (int64_t j = 0; j < start; ++j) y[j] = store<T>(0.0f);
            for (int64_t j = start; j < n; ++j) y[j] = store<T>(e[j] * inv);
            for (int64_t j = n; j < seq; ++j) y[j] = store<T>(0.0f);
          }
        },
        row_grain(seq));
  });
}

void causal_softmax_backward(const Tensor& ds, const Tensor& dp, const Tensor& p, int64_t seq,
                             float scale, const Tensor& positions, int64_t heads) {
  const int64_t rows = p.numel() / seq;
  const KeyWindow window(positions, seq, heads);
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
            const int64_t start = window.start(r);
            const T* gr = g + r * seq;
            const T* pr = pp + r * seq;
            T* y = out + r * seq;
            float dot = 0.0f;
            for (int64_t j = start; j < n; ++j) dot += load(gr[j]) * load(pr[j]);
            for (int64_t j = 0; j < start; ++j) y[j] = store<T>(0.0f);
            for (int64_t j = start; j < n; ++j)
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
