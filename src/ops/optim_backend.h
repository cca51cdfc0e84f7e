// Private: backend entry points of the optimizer ops (ops/optim.h; see backend.h for the
// convention). CPU: src/ops/cpu/optim.cpp, optim_state.cpp; CUDA: kernels/optim.cu, lars.cu. (The
// training-step ops: training_backend.h.)
#pragma once

#include <span>

#include "ops/optim_math.h"
#include "stoker/core/tensor.h"

namespace stoker::ops {

#define STOKER_OPTIM_BACKEND_DECLS                                                                 \
  void sgd_step(std::span<const Tensor> params, std::span<const Tensor> grads,                     \
                std::span<const Tensor> bufs, const detail::SgdConsts& c, const Tensor& found_inf, \
                const Tensor& lr_device);                                                          \
  void adamw_step(std::span<const Tensor> params, std::span<const Tensor> grads,                   \
                  std::span<const Tensor> exp_avgs, std::span<const Tensor> exp_avg_sqs,           \
                  const detail::AdamWConsts& c, const Tensor& found_inf, const Tensor& step_state, \
                  double beta1, double beta2, double lr, std::span<const Tensor> compute_copies,   \
                  const Tensor& lr_device, double weight_decay);                                   \
  void sgd_step_compact(std::span<const Tensor> params, std::span<const Tensor> grads,             \
                        std::span<const StateTensor> bufs, const detail::SgdConsts& c,             \
                        const StateStorage& storage, const Tensor& found_inf);                     \
  void adamw_step_compact(std::span<const Tensor> params, std::span<const Tensor> grads,           \
                          std::span<const StateTensor> exp_avgs,                                   \
                          std::span<const StateTensor> exp_avg_sqs, const detail::AdamWConsts& c,  \
                          const StateStorage& storage, const Tensor& found_inf,                    \
                          const Tensor& step_state, double beta1, double beta2, double lr);        \
  void lars_step(std::span<const Tensor> params, std::span<const Tensor> grads,                    \
                 std::span<const Tensor> bufs, std::span<const uint8_t> adapt,                     \
                 const detail::LarsConsts& c, const Tensor& found_inf, const Tensor& lr_device);

namespace cpu {
STOKER_OPTIM_BACKEND_DECLS
}
namespace cuda {
STOKER_OPTIM_BACKEND_DECLS
}
#undef STOKER_OPTIM_BACKEND_DECLS

}  // namespace stoker::ops
