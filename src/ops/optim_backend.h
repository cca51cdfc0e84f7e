// Private: backend entry points of the optimizer and training-step ops (see backend.h for the
// convention).
#pragma once

#include <span>

#include "ops/optim_math.h"
#include "stoker/core/tensor.h"
#include "stoker/ops/training.h"

namespace stoker::ops {

#define STOKER_OPTIM_BACKEND_DECLS                                                                 \
  void sgd_step(std::span<const Tensor> params, std::span<const Tensor> grads,                     \
                std::span<const Tensor> bufs, const detail::SgdConsts& c,                          \
                const Tensor& found_inf);                                                          \
  void adamw_step(std::span<const Tensor> params, std::span<const Tensor> grads,                   \
                  std::span<const Tensor> exp_avgs, std::span<const Tensor> exp_avg_sqs,           \
                  const detail::AdamWConsts& c, const Tensor& found_inf, const Tensor& step_state, \
                  double beta1, double beta2, double lr);                                          \
  void sgd_step_compact(std::span<const Tensor> params, std::span<const Tensor> grads,             \
                        std::span<const StateTensor> bufs, const detail::SgdConsts& c,             \
                        const StateStorage& storage, const Tensor& found_inf);                     \
  void adamw_step_compact(std::span<const Tensor> params, std::span<const Tensor> grads,           \
                          std::span<const StateTensor> exp_avgs,                                   \
                          std::span<const StateTensor> exp_avg_sqs, const detail::AdamWConsts& c,  \
                          const StateStorage& storage, const Tensor& found_inf,                    \
                          const Tensor& step_state, double beta1, double beta2, double lr);        \
  void clip_by_total_norm(std::span<const Tensor> xs, const Tensor& total_norm, float max_norm);   \
  void loss_monitor_update(const Tensor& monitor, const Tensor& loss, int64_t step);               \
  void unscale_and_check(std::span<const Tensor> grads, const Tensor& scale,                       \
                         const Tensor& found_inf);                                                 \
  void update_scale(const Tensor& scale, const Tensor& state, const Tensor& found_inf,             \
                    const ScaleUpdate& u);                                                         \
  void cast_multi(std::span<const Tensor> dsts, std::span<const Tensor> srcs);

namespace cpu {
STOKER_OPTIM_BACKEND_DECLS
}
namespace cuda {
STOKER_OPTIM_BACKEND_DECLS
}
#undef STOKER_OPTIM_BACKEND_DECLS

}  // namespace stoker::ops
