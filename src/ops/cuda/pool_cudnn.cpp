// CUDA max / average pooling through cuDNN (cudnnPoolingForward / Backward; deprecated in
// cuDNN 9, present in every 9.x — see cudnn_util.h).
//
// Modes: CUDNN_POOLING_MAX_DETERMINISTIC (the backward gives each window's gradient to one
// element, so results do not vary run to run), CUDNN_PROPAGATE_NAN (a NaN in a window is the
// max, as in PyTorch), and CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING for average pooling —
// PyTorch's count_include_pad=True divisor kh * kw, which equals it because windows never run
// past the padded input (floor output size, padding <= kernel / 2; checked in src/ops/pool.cpp).
// Average pooling's backward needs no x or y values; cuDNN still takes their descriptors, so
// dy and dx stand in for y and x (same shapes). The NHWC max-pooling backward runs on stoker's
// own kernels instead (ops/cuda/maxpool_nhwc.h: cuDNN's ran at ~0.6 TB/s on the ResNet stem).
#include <cudnn.h>

#include "ops/cuda/cudnn_util.h"
#include "ops/cuda/maxpool_nhwc.h"
#include "ops/geometry.h"
#include "ops/pool_stubs.h"

namespace stoker::ops::cuda {

namespace {

class PoolDesc {
 public:
  PoolDesc(cudnnPoolingMode_t mode, const Pool2dParams& p) {
    STOKER_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&d_));
    STOKER_CUDNN_CHECK(cudnnSetPooling2dDescriptor(
        d_, mode, CUDNN_PROPAGATE_NAN, cudnn_int(p.kernel[0], "kernel"),
        cudnn_int(p.kernel[1], "kernel"), cudnn_int(p.padding[0], "padding"),
        cudnn_int(p.padding[1], "padding"), cudnn_int(p.stride[0], "stride"),
        cudnn_int(p.stride[1], "stride")));
  }
  ~PoolDesc() { cudnnDestroyPoolingDescriptor(d_); }
  PoolDesc(const PoolDesc&) = delete;
  PoolDesc& operator=(const PoolDesc&) = delete;
  cudnnPoolingDescriptor_t get() const { return d_; }

 private:
  cudnnPoolingDescriptor_t d_ = nullptr;
};

// Descriptors of the input-sized and output-sized tensors of a pooling problem.
struct PoolDescs {
  TensorDesc in, out;
  PoolDescs(const Shape& x, DType t, const Pool2dParams& p) {
    const detail::PoolGeometry g = detail::pool_geometry(x, p);
    in.set(t, p.layout, g.n, g.c, g.h, g.w);
    out.set(t, p.layout, g.n, g.c, g.oh, g.ow);
  }
};

void check_call(cudnnStatus_t status, const char* op, const char* call, const Tensor& x,
                const Pool2dParams& p) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  STOKER_THROW("ops::", op, ": ", call, " failed with ", cudnnGetErrorString(status), " for ",
               x.str(), " (", layout_name(p.layout), ", kernel ", p.kernel[0], "x", p.kernel[1],
               ", stride ", p.stride[0], "x", p.stride[1], ", padding ", p.padding[0], "x",
               p.padding[1], ")");
}

// What both passes hold while they enqueue: the device, the pooling and tensor descriptors of
// a problem whose input has `in`'s shape and dtype, and the device's cuDNN handle.
struct PoolCall {
  core::DeviceScope scope;
  PoolDesc pool;
  PoolDescs desc;
  CudnnLease lease;
  PoolCall(cudnnPoolingMode_t mode, const Tensor& in, const Pool2dParams& p)
      : scope(in.device().index),
        pool(mode, p),
        desc(in.shape(), in.dtype(), p),
        lease(in.device()) {}
};

void forward(cudnnPoolingMode_t mode, const char* op, const Tensor& y, const Tensor& x,
             const Pool2dParams& p) {
  const PoolCall c(mode, x, p);
  const float one = 1.0f, zero = 0.0f;
  check_call(cudnnPoolingForward(c.lease.handle(), c.pool.get(), &one, c.desc.in.get(), x.data(),
                                 &zero, c.desc.out.get(), y.data()),
             op, "cudnnPoolingForward", x, p);
}

void backward(cudnnPoolingMode_t mode, const char* op, const Tensor& dx, const Tensor& dy,
              const Tensor& x, const Tensor& y, const Pool2dParams& p) {
  const PoolCall c(mode, dx, p);
  const float one = 1.0f, zero = 0.0f;
  check_call(cudnnPoolingBackward(c.lease.handle(), c.pool.get(), &one, c.desc.out.get(), y.data(),
                                  c.desc.out.get(), dy.data(), c.desc.in.get(), x.data(), &zero,
                                  c.desc.in.get(), dx.data()),
             op, "cudnnPoolingBackward", dx, p);
}

}  // namespace

void maxpool2d_forward(const Tensor& y, const Tensor& x, const Pool2dParams& p) {
  forward(CUDNN_POOLING_MAX_DETERMINISTIC, "maxpool2d_forward", y, x, p);
}

void maxpool2d_backward(const Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& y,
                        const Pool2dParams& p) {
  // The argmax kernels' own problem range (NHWC, a byte per window position, 32-bit indices).
  if (ops::maxpool2d_argmax_supported(x.device(), x.shape(), p)) {
    const core::DeviceScope scope(x.device().index);
    maxpool_nhwc_backward(dx, dy, x, p);
    return;
  }
  backward(CUDNN_POOLING_MAX_DETERMINISTIC, "maxpool2d_backward", dx, dy, x, y, p);
}

void avgpool2d_forward(const Tensor& y, const Tensor& x, const Pool2dParams& p) {
  forward(CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, "avgpool2d_forward", y, x, p);
}

void avgpool2d_backward(const Tensor& dx, const Tensor& dy, const Pool2dParams& p) {
  backward(CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, "avgpool2d_backward", dx, dy, dx, dy, p);
}

STOKER_REGISTER_STUB(maxpool2d_forward, maxpool2d_forward);
STOKER_REGISTER_STUB(maxpool2d_backward, maxpool2d_backward);
STOKER_REGISTER_STUB(avgpool2d_forward, avgpool2d_forward);
STOKER_REGISTER_STUB(avgpool2d_backward, avgpool2d_backward);

}  // namespace stoker::ops::cuda
