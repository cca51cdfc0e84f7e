#include "stoker/core/dtype.h"

#include <ostream>

#include "stoker/core/error.h"

namespace stoker::core {

DType parse_dtype(std::string_view name) {
  if (name == "f32" || name == "float32" || name == "fp32") return DType::f32;
  if (name == "f16" || name == "float16" || name == "fp16" || name == "half") return DType::f16;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "i32" || name == "int32") return DType::i32;
  if (name == "i64" || name == "int64") return DType::i64;
  if (name == "u8" || name == "uint8") return DType::u8;
  STOKER_THROW("unknown dtype '", name, "': expected one of f32, f16, bf16, i32, i64, u8");
}

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

}  // namespace stoker::core
