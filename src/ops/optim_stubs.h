// Private: backend entry points of the optimizer ops (ops/optim.h; dispatch.h has the
// convention). CPU: src/ops/cpu/optim.cpp, optim_state.cpp; CUDA: kernels/optim.cu, lars.cu. (The
// training-step ops: training_stubs.h.)
#pragma once

#include <cstdint>
#include <span>

#include "ops/dispatch.h"
#include "ops/optim_math.h"

namespace stoker::ops {

STOKER_DECLARE_STUB(sgd_step, void(std::span<const Tensor> params, std::span<const Tensor> grads,
                                   std::span<const Tensor> bufs, const detail::SgdConsts& c,
                                   const Tensor& found_inf, const Tensor& lr_device));
STOKER_DECLARE_STUB(adamw_step,
                    void(std::span<const Tensor> params, std::span<const Tensor> grads,
                         std::span<const Tensor> exp_avgs, std::span<const Tensor> exp_avg_sqs,
                         const detail::AdamWConsts& c, const Tensor& found_inf,
                         const Tensor& step_state, double beta1, double beta2, double lr,
                         std::span<const Tensor> compute_copies, const Tensor& lr_device,
                         double weight_decay));
STOKER_DECLARE_STUB(sgd_step_compact,
                    void(std::span<const Tensor> params, std::span<const Tensor> grads,
                         std::span<const StateTensor> bufs, const detail::SgdConsts& c,
                         const StateStorage& storage, const Tensor& found_inf));
STOKER_DECLARE_STUB(adamw_step_compact,
                    void(std::span<const Tensor> params, std::span<const Tensor> grads,
                         std::span<const StateTensor> exp_avgs,
                         std::span<const StateTensor> exp_avg_sqs, const detail::AdamWConsts& c,
                         const StateStorage& storage, const Tensor& found_inf,
                         const Tensor& step_state, double beta1, double beta2, double lr));
STOKER_DECLARE_STUB(lars_step, void(std::span<const Tensor> params, std::span<const Tensor> grads,
                                    std::span<const Tensor> bufs, std::span<const uint8_t> adapt,
                                    const detail::LarsConsts& c, const Tensor& found_inf,
                                    const Tensor& lr_device));

}  // namespace stoker::ops
