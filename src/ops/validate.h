// Private: input checks shared by the public ops. Each throws stoker::Error naming the op, the
// offending tensors (dtype, shape, device) and what was expected.
#pragma once

#include <span>
#include <string_view>

#include "stoker/core/tensor.h"

namespace stoker::ops::detail {

void check_defined(std::string_view op, std::string_view name, const Tensor& t);
void check_float(std::string_view op, std::string_view name, const Tensor& t);
void check_same_device(std::string_view op, std::string_view name_a, const Tensor& a,
                       std::string_view name_b, const Tensor& b);
void check_same_dtype(std::string_view op, std::string_view name_a, const Tensor& a,
                      std::string_view name_b, const Tensor& b);
void check_same_numel(std::string_view op, std::string_view name_a, const Tensor& a,
                      std::string_view name_b, const Tensor& b);
// The device is usable in this build (CUDA tensors need STOKER_WITH_CUDA).
void check_backend(std::string_view op, const Tensor& t);

}  // namespace stoker::ops::detail
