// 2-D pooling: max, average and global average, forward and backward, PyTorch's semantics
// (floor output size, no ceil_mode; padding at most half the kernel): max treats padding as -inf,
// propagates NaN and sends the gradient to a window's first maximum; avg has count_include_pad.
// One float dtype; 4-D tensors in `layout`; backward outputs are overwritten. All on the current
// stream. Thread-safe (distinct outputs). Details: docs/ops.md#batch-norm-pooling-and-convolutions.
#pragma once

#include <array>
#include <cstdint>

#include "stoker/core/tensor.h"
#include "stoker/ops/layout.h"

namespace stoker::ops {

struct Pool2dParams {
  std::array<int64_t, 2> kernel{2, 2};   // (h, w), >= 1
  std::array<int64_t, 2> stride{2, 2};   // (h, w), >= 1
  std::array<int64_t, 2> padding{0, 0};  // (h, w), 0 <= padding <= kernel / 2
  Layout layout = Layout::nchw;
};

// The output shape for input shape `x` (validates like the ops).
Shape pool2d_output_shape(const Shape& x, const Pool2dParams& p);

void maxpool2d_forward(const Tensor& y, const Tensor& x, const Pool2dParams& p);
// dx from dy and the forward's input x and output y.
void maxpool2d_backward(const Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& y,
                        const Pool2dParams& p);

// Max pooling that remembers where each maximum was, so that the backward needs neither x nor
// y: argmax (u8, y's shape) = row * kw + col, within the unpadded window of kh x kw positions, of
// the element maxpool2d_backward gives that output's gradient to (the first maximum; a NaN's
// position). y is maxpool2d_forward's. The backward from it gives maxpool2d_backward's dx bit
// for bit; an argmax byte that names no element of x (not written by the forward) drops that
// window's gradient. A layer keeps 1 byte per output instead of its input and output, and the
// backward skips finding the maxima again.
// Needs kh * kw <= 256; CPU: both layouts; CUDA: NHWC with x below 2^30 elements (stoker's own
// kernels). maxpool2d_argmax_supported says whether a problem qualifies.
bool maxpool2d_argmax_supported(Device device, const Shape& x, const Pool2dParams& p);
void maxpool2d_forward_argmax(const Tensor& y, const Tensor& argmax, const Tensor& x,
                              const Pool2dParams& p);
void maxpool2d_backward_argmax(const Tensor& dx, const Tensor& dy, const Tensor& argmax,
                               const Pool2dParams& p);

void avgpool2d_forward(const Tensor& y, const Tensor& x, const Pool2dParams& p);
void avgpool2d_backward(const Tensor& dx, const Tensor& dy, const Pool2dParams& p);

// y [N, C] = mean of x over H and W.
void global_avgpool_forward(const Tensor& y, const Tensor& x, Layout layout);
// dx[n, c, h, w] = dy[n, c] / (H * W).
void global_avgpool_backward(const Tensor& dx, const Tensor& dy, Layout layout);

}  // namespace stoker::ops
