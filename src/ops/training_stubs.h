// Private: backend entry points of the training-step ops (ops/training.h; dispatch.h has the
// convention). CPU: src/ops/cpu/training.cpp; CUDA: kernels/training.cu.
#pragma once

#include <cstdint>
#include <span>

#include "ops/dispatch.h"
#include "stoker/ops/optim.h"

namespace stoker::ops {

STOKER_DECLARE_STUB(clip_by_total_norm,
                    void(std::span<const Tensor> xs, const Tensor& total_norm, float max_norm));
STOKER_DECLARE_STUB(unscale_and_check, void(std::span<const Tensor> grads, const Tensor& scale,
                                            const Tensor& found_inf));
STOKER_DECLARE_STUB(update_scale, void(const Tensor& scale, const Tensor& state,
                                       const Tensor& found_inf, const ScaleUpdate& u));
STOKER_DECLARE_STUB(loss_monitor_update, void(const Tensor& monitor, const Tensor& loss,
                                              int64_t step, const Tensor& step_device));

}  // namespace stoker::ops
