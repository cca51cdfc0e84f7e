#include "ops/validate.h"

#include "stoker/core/error.h"

namespace stoker::ops::detail {

void check_defined(std::string_view op, std::string_view name, const Tensor& t) {
  STOKER_CHECK(t.defined(), "ops::", op, ": ", name, " is an undefined tensor");
}

void check_float(std::string_view op, std::string_view name, const Tensor& t) {
  check_defined(op, name, t);
  STOKER_CHECK(core::is_float(t.dtype()), "ops::", op, ": ", name, " is ", t.str(),
               "; expected a float dtype (f32, f16 or bf16)");
}

void check_same_device(std::string_view op, std::string_view name_a, const Tensor& a,
                       std::string_view name_b, const Tensor& b) {
  STOKER_CHECK_HINT(a.device() == b.device(), "move both to one device with Tensor::to(device)",
                    "ops::", op, ": ", name_a, " is ", a.str(), " but ", name_b, " is ", b.str(),
                    "; expected both on one device");
}

void check_same_dtype(std::string_view op, std::string_view name_a, const Tensor& a,
                      std::string_view name_b, const Tensor& b) {
  STOKER_CHECK_HINT(a.dtype() == b.dtype(), "convert one of them with ops::cast", "ops::", op, ": ",
                    name_a, " is ", a.str(), " but ", name_b, " is ", b.str(),
                    "; expected equal dtypes");
}

void check_same_numel(std::string_view op, std::string_view name_a, const Tensor& a,
                      std::string_view name_b, const Tensor& b) {
  STOKER_CHECK(a.numel() == b.numel(), "ops::", op, ": ", name_a, " is ", a.str(), " but ", name_b,
               " is ", b.str(), "; expected equal element counts (no broadcasting)");
}

void check_backend(std::string_view op, const Tensor& t) {
  if (t.device().is_cpu()) return;
  STOKER_CHECK_HINT(core::built_with_cuda(), "reconfigure with -DSTOKER_WITH_CUDA=ON", "ops::", op,
                    ": ", t.str(), " but stoker was built without CUDA");
  STOKER_CHECK_HINT(t.device().index < core::cuda_device_count(),
                    "check nvidia-smi and CUDA_VISIBLE_DEVICES", "ops::", op, ": ", t.str(),
                    " but only ", core::cuda_device_count(), " CUDA devices are visible");
}

void check_float_operands(std::string_view op, std::string_view first_name, const Tensor& first,
                          std::string_view second_name, const Tensor& second,
                          std::string_view third_name, const Tensor& third) {
  check_float(op, first_name, first);
  check_float(op, second_name, second);
  check_float(op, third_name, third);
  check_backend(op, first);
  check_same_device(op, first_name, first, second_name, second);
  check_same_device(op, first_name, first, third_name, third);
  check_same_dtype(op, second_name, second, third_name, third);
}

}  // namespace stoker::ops::detail
