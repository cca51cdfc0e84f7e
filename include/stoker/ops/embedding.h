// Embedding lookup: y[i, :] = table[ids[i], :] for ids (i32 or i64, any shape, flattened to N)
// and table [V, D] (f32). y is [N, D] in table's dtype or a half dtype.
#pragma once

#include "stoker/core/tensor.h"

namespace stoker::ops {

// An id outside [0, V): on the CPU a stoker::Error naming the id and its position; on the GPU
// (which cannot throw without a host sync) the row is filled with NaN, so the loss turns NaN
// and the Trainer's NaN check stops the run at that step.
void embedding_forward(const Tensor& y, const Tensor& ids, const Tensor& table);
// dtable[ids[i], :] += dy[i, :] (fp32 accumulation into the f32 dtable).
void embedding_backward(const Tensor& dtable, const Tensor& dy, const Tensor& ids);

}  // namespace stoker::ops
