// Private: a byte copy between devices for callers that manage buffer lifetimes themselves.
#pragma once

#include "stoker/core/tensor.h"

namespace stoker::core::detail {

// As copy_bytes (stoker/core/tensor.h), without the per-copy keep-alive: that is a host callback
// in the stream, which stalls it for a round trip. For callers that keep both buffers alive until
// the copy has run, e.g. optim::OffloadedOptimizer's long-lived pinned buffers, copied hundreds of
// times per step (its destructor waits for its copies).
void copy_bytes_unowned(const Tensor& dst, const Tensor& src);

}  // namespace stoker::core::detail
