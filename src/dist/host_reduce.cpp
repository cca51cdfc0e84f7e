#include "dist/host_reduce.h"

#include <algorithm>
#include <vector>

#include "stoker/core/error.h"
#include "stoker/core/half.h"

namespace stoker::dist::detail {

namespace {

// Loads/stores an element as the accumulation type: float for the float dtypes, the integer
// itself otherwise.
template <DType D>
struct Elem;
template <>
struct Elem<DType::f32> {
  using Acc = float;
  static float load(const void* p, int64_t i) { return static_cast<const float*>(p)[i]; }
  static void store(void* p, int64_t i, float v) { static_cast<float*>(p)[i] = v; }
};
template <>
struct Elem<DType::f16> {
  using Acc = float;
  static float load(const void* p, int64_t i) {
    return core::half_bits_to_float(static_cast<const uint16_t*>(p)[i]);
  }
  static void store(void* p, int64_t i, float v) {
    static_cast<uint16_t*>(p)[i] = core::float_to_half_bits(v);
  }
};
template <>
struct Elem<DType::bf16> {
  using Acc = float;
  static float load(const void* p, int64_t i) {
    return core::bf16_bits_to_float(static_cast<const uint16_t*>(p)[i]);
  }
  static void store(void* p, int64_t i, float v) {
    static_cast<uint16_t*>(p)[i] = core::float_to_bf16_bits(v);
  }
};
template <typename T>
struct IntElem {
  using Acc = T;
  static T load(const void* p, int64_t i) { return static_cast<const T*>(p)[i]; }
  static void store(void* p, int64_t i, T v) { static_cast<T*>(p)[i] = v; }
};
template <>
struct Elem<DType::i32> : IntElem<int32_t> {};
template <>
struct Elem<DType::i64> : IntElem<int64_t> {};
template <>
struct Elem<DType::u8> : IntElem<uint8_t> {};

template <DType D>
void reduce_typed(ReduceOp op, std::span<const void* const> srcs, void* dst, int64_t begin,
                  int64_t end) {
  using E = Elem<D>;
  using Acc = typename E::Acc;
  const size_t n = srcs.size();
  for (int64_t i = begin; i < end; ++i) {
    Acc acc = E::load(srcs[0], i);
    for (size_t q = 1; q < n; ++q) {
      const Acc v = E::load(srcs[q], i);
      switch (op) {
        case ReduceOp::sum:
        case ReduceOp::avg:
          acc = static_cast<Acc>(acc + v);
          break;
        case ReduceOp::max:
          acc = std::max(acc, v);
          break;
        case ReduceOp::min:
          acc = std::min(acc, v);
          break;
      }
    }
    if (op == ReduceOp::avg) acc = static_cast<Acc>(acc / static_cast<Acc>(n));
    E::store(dst, i, acc);
  }
}

}  // namespace

void host_reduce(DType dtype, ReduceOp op, std::span<const void* const> srcs, void* dst,
                 int64_t begin, int64_t end) {
  STOKER_CHECK(!srcs.empty(), "host_reduce: no sources");
  switch (dtype) {
    case DType::f32:
      return reduce_typed<DType::f32>(op, srcs, dst, begin, end);
    case DType::f16:
      return reduce_typed<DType::f16>(op, srcs, dst, begin, end);
    case DType::bf16:
      return reduce_typed<DType::bf16>(op, srcs, dst, begin, end);
    case DType::i32:
      return reduce_typed<DType::i32>(op, srcs, dst, begin, end);
    case DType::i64:
      return reduce_typed<DType::i64>(op, srcs, dst, begin, end);
    case DType::u8:
      return reduce_typed<DType::u8>(op, srcs, dst, begin, end);
  }
}

}  // namespace stoker::dist::detail
