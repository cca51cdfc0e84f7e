// Private: input checks shared by the public ops. Each throws stoker::Error naming the op, the
// offending tensors (dtype, shape, device) and what was expected.
#pragma once

#include <span>
#include <string_view>

#include "stoker/core/tensor.h"

namespace stoker::ops {
struct GemmOptions;
}

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
// Float tensors `first`, `second` and `third` on first's device, which this build can use, with
// second and third of one dtype: the operands of out = f(a, b), a GEMM or a convolution.
// Checked in that order (float, backend, device, dtype), so the first fault is reported.
void check_float_operands(std::string_view op, std::string_view first_name, const Tensor& first,
                          std::string_view second_name, const Tensor& second,
                          std::string_view third_name, const Tensor& third);
// options.epilogue / aux / beta / bias of a GEMM into c (already checked: [m, n], float, on its
// device); `op` names the caller ("gemm", "gemm_fp8").
void check_gemm_epilogue(std::string_view op, const Tensor& c, const GemmOptions& o);

}  // namespace stoker::ops::detail
