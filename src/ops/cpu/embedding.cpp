// CPU reference for the embedding lookup and its gradient.
// Every id is range-checked before anything is written, in index order, so the error names the
// FIRST bad id and its position and the outputs are untouched when it throws.
// The backward is a scatter-add (repeated ids hit one row), so it is split by COLUMN blocks, not
// by ids: each task adds its columns of every dy row in id order, fp32 as the header promises.
// No two tasks touch one element and the sum order is fixed: deterministic at any thread count.
#include <algorithm>

#include "ops/cpu/parallel.h"
#include "ops/embedding_stubs.h"

namespace stoker::ops::cpu {

namespace {
template <typename F>
void visit_ids(const Tensor& ids, F&& f) {
  if (ids.dtype() == DType::i32) {
    f(static_cast<const int32_t*>(ids.data()));
  } else {
    f(static_cast<const int64_t*>(ids.data()));
  }
}

template <typename I>
void check_ids(const char* op, const I* id, const Tensor& ids, const Tensor& table) {
  const int64_t v = table.size(0);
  for (int64_t i = 0; i < ids.numel(); ++i) {
    STOKER_CHECK(id[i] >= 0 && id[i] < v, "ops::", op, ": id ", static_cast<int64_t>(id[i]),
                 " at position ", i, " of ids ", ids.str(), " is outside [0, ", v,
                 ") for the table ", table.str());
  }
}
}  // namespace

void embedding_forward(const Tensor& y, const Tensor& ids, const Tensor& table) {
  const int64_t d = table.size(1);
  const float* t = static_cast<const float*>(table.data());
  visit_ids(ids, [&](const auto* id) {
    check_ids("embedding_forward", id, ids, table);
    visit_float(y.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* out = static_cast<T*>(y.data());
      parallel_range(
          ids.numel(),
          [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r) {
              const float* src = t + static_cast<int64_t>(id[r]) * d;
              T* dst = out + r * d;
              for (int64_t j = 0; j < d; ++j) dst[j] = store<T>(src[j]);
            }
          },
          std::max<int64_t>(1, kGrain / d));
    });
  });
}

void embedding_backward(const Tensor& dtable, const Tensor& dy, const Tensor& ids) {
  const int64_t d = dtable.size(1);
  const int64_t n = ids.numel();
  float* t = static_cast<float*>(dtable.data());
  constexpr int64_t kBlock = 64;
  visit_ids(ids, [&](const auto* id) {
    check_ids("embedding_backward", id, ids, dtable);
    visit_float(dy.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* g = static_cast<const T*>(dy.data());
      parallel_range((d + kBlock - 1) / kBlock,
                     [&](int64_t b0, int64_t b1) {
                       const int64_t j0 = b0 * kBlock, j1 = std::min(d, b1 * kBlock);
                       for (int64_t r = 0; r < n; ++r) {
                         float* dst = t + static_cast<int64_t>(id[r]) * d;
                         const T* src = g + r * d;
                         for (int64_t j = j0; j < j1; ++j) dst[j] += load(src[j]);
                       }
                     },
                     std::max<int64_t>(1, kGrain / std::max<int64_t>(1, n * kBlock)));
    });
  });
}

STOKER_REGISTER_STUB(embedding_forward, embedding_forward);
STOKER_REGISTER_STUB(embedding_backward, embedding_backward);

}  // namespace stoker::ops::cpu
