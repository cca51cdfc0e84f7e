// Private: backend entry points of ops/loss.h (dispatch.h has the convention).
// CPU: src/ops/cpu/loss.cpp; CUDA: kernels/loss.cu.
#pragma once

#include <cstdint>

#include "ops/dispatch.h"

namespace stoker::ops {

// divide_by undefined: loss = mean, count = rows counted; defined: loss += sum / divide_by.
// `classes` (1..C, resolved by the front end): the leading columns that are classes.
STOKER_DECLARE_STUB(cross_entropy_forward,
                    void(const Tensor& loss, const Tensor& count, const Tensor& lse,
                         const Tensor& logits, const Tensor& target, int64_t ignore_index,
                         float label_smoothing, const Tensor& divide_by, int64_t classes));
STOKER_DECLARE_STUB(count_targets,
                    void(const Tensor& count, const Tensor& target, int64_t ignore_index));
STOKER_DECLARE_STUB(cross_entropy_backward,
                    void(const Tensor& dlogits, const Tensor& logits, const Tensor& target,
                         const Tensor& lse, const Tensor& count, int64_t ignore_index,
                         float label_smoothing, float scale, const Tensor& grad_scale,
                         int64_t classes));
STOKER_DECLARE_STUB(mse_forward,
                    void(const Tensor& loss, const Tensor& pred, const Tensor& target));
STOKER_DECLARE_STUB(mse_backward,
                    void(const Tensor& dpred, const Tensor& pred, const Tensor& target, float scale,
                         const Tensor& grad_scale));

}  // namespace stoker::ops
