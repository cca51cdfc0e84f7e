// DType: the element types a Tensor can hold.
//
// f32/f16/bf16 are the float types (compute, storage, mixed precision); i32/i64 hold labels and
// indices; u8 holds images as they come out of the decoder. `dtype_of<T>()` maps C++ types to
// DTypes so typed accessors can check what they are given.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

#include "stoker/core/half.h"

namespace stoker::core {

enum class DType : uint8_t { f32, f16, bf16, i32, i64, u8 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::f16:
      return 2;
    case DType::bf16:
      return 2;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::u8:
      return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u8:
      return "u8";
  }
  return "?";
}

constexpr bool is_float(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

// Parses "f32", "bf16", ... (also "float32", "float16", "bfloat16"); throws on anything else.
DType parse_dtype(std::string_view name);

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<Half>() {
  return DType::f16;
}
template <>
constexpr DType dtype_of<BFloat16>() {
  return DType::bf16;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::i32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::i64;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::u8;
}

std::ostream& operator<<(std::ostream& os, DType t);

}  // namespace stoker::core

namespace stoker {
using core::BFloat16;
using core::DType;
using core::Half;
}  // namespace stoker
