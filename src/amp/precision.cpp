#include "stoker/amp/precision.h"

#include "stoker/core/error.h"

namespace stoker::amp {

Precision parse_precision(std::string_view name, std::string_view flag) {
  for (const Precision p : {Precision::fp32, Precision::bf16, Precision::fp16, Precision::fp8})
    if (name == precision_name(p)) return p;
  STOKER_THROW(flag, ": '", name, "' is not fp32, bf16, fp16 or fp8");
}

}  // namespace stoker::amp
