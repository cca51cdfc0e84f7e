// Loss kernels: fused softmax cross-entropy and mean squared error. fp32 math.
#pragma once

#include <cstdint>

#include "stoker/core/tensor.h"

namespace stoker::ops {

// logits [N, C] (float dtype), target [N] (i32/i64). Writes lse [N] f32 (log-sum-exp per row,
// saved for the backward), and loss (rank-0 f32) = mean over non-ignored rows of
//   (1 - s) * (lse - logit[target]) + s * (lse - mean_c logit[c])      (s = label_smoothing)
// and count (rank-0 f32) = number of non-ignored rows. A target outside [0, C) that is not
// ignore_index is an error (CPU: thrown; GPU: the loss becomes NaN).
void cross_entropy_forward(const Tensor& loss, const Tensor& count, const Tensor& lse,
                           const Tensor& logits, const Tensor& target, int64_t ignore_index,
                           float label_smoothing);
// Chunked cross-entropy (nn::LinearCrossEntropyLoss computes the logits a chunk of rows at a
// time): count_targets first gives count = the number of targets of ALL chunks that are not
// ignore_index (rank-0 f32); then each chunk's cross_entropy_forward_chunk ADDS the sum of its
// rows' losses divided by that count into loss (rank-0 f32, zeroed before the first chunk), so
// after the last chunk loss is the mean over all rows. lse and the row loss as above; the
// backward of a chunk is cross_entropy_backward with the same count.
// `classes` (chunk and backward; 0: all C): only logits[:, 0, classes) are classes, the columns
// from `classes` on are padding (a head padded to aligned rows, nn::LinearCrossEntropyLoss):
// they take no part in the max, the log-sum-exp or the smoothing mean (C is then `classes`),
// targets must lie in [0, classes), and their gradient is written as 0.
void count_targets(const Tensor& count, const Tensor& target, int64_t ignore_index);
void cross_entropy_forward_chunk(const Tensor& loss, const Tensor& lse, const Tensor& logits,
                                 const Tensor& target, const Tensor& count, int64_t ignore_index,
                                 float label_smoothing, int64_t classes = 0);
// dlogits = scale * g / count * (softmax(logits) - ((1 - s) * one_hot(target) + s / C)), zero
// rows for ignored targets. dlogits may be logits itself (each element is read before it is
// written). count is the device scalar from the forward (no host sync); g is
// the optional rank-0 f32 `grad_scale` on the same device (1 when undefined): fp16's loss
// scale, applied in fp32 before the gradient is rounded to the logits' dtype. `classes`: as
// above.
void cross_entropy_backward(const Tensor& dlogits, const Tensor& logits, const Tensor& target,
                            const Tensor& lse, const Tensor& count, int64_t ignore_index,
                            float label_smoothing, float scale, const Tensor& grad_scale = {},
                            int64_t classes = 0);

// loss (rank-0 f32) = mean((pred - target)^2); pred and target share a float dtype.
void mse_forward(const Tensor& loss, const Tensor& pred, const Tensor& target);
// dpred = scale * g * 2 * (pred - target) / numel (g: the optional device `grad_scale`, as
// above).
void mse_backward(const Tensor& dpred, const Tensor& pred, const Tensor& target, float scale,
                  const Tensor& grad_scale = {});

}  // namespace stoker::ops
