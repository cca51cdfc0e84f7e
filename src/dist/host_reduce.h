// Element-wise reduction of host buffers, shared by the CPU backends (ThreadCommunicator,
// TcpCommunicator). Private to src/dist.
//
// Each element is reduced over the sources in their given order (rank 0 first), float dtypes in
// fp32 with a single rounding to the dtype at the end, so every rank that runs the same
// reduction gets the same bits.
#pragma once

#include <cstdint>
#include <span>

#include "stoker/core/dtype.h"
#include "stoker/dist/communicator.h"

namespace stoker::dist::detail {

// dst[i] = op(srcs[0][i], srcs[1][i], ...) for i in [begin, end); avg divides by srcs.size().
// dst may be one of the sources (each element is read before it is written).
void host_reduce(DType dtype, ReduceOp op, std::span<const void* const> srcs, void* dst,
                 int64_t begin, int64_t end);

}  // namespace stoker::dist::detail
