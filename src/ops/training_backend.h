// Private: backend entry points of the training-step ops (ops/training.h; see backend.h for the
// convention). CPU: src/ops/cpu/training.cpp; CUDA: kernels/training.cu.
#pragma once

#include <cstdint>
#include <span>

#include "stoker/core/tensor.h"
#include "stoker/ops/training.h"

namespace stoker::ops {

#define STOKER_TRAINING_BACKEND_DECLS                                                            \
  void clip_by_total_norm(std::span<const Tensor> xs, const Tensor& total_norm, float max_norm); \
  void unscale_and_check(std::span<const Tensor> grads, const Tensor& scale,                     \
                         const Tensor& found_inf);                                               \
  void update_scale(const Tensor& scale, const Tensor& state, const Tensor& found_inf,           \
                    const ScaleUpdate& u);                                                       \
  void loss_monitor_update(const Tensor& monitor, const Tensor& loss, int64_t step,              \
                           const Tensor& step_device);

namespace cpu {
STOKER_TRAINING_BACKEND_DECLS
}
namespace cuda {
STOKER_TRAINING_BACKEND_DECLS
}
#undef STOKER_TRAINING_BACKEND_DECLS

}  // namespace stoker::ops
