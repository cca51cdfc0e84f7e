// Private: what the cuDNN-backed ops share — one handle per device, RAII descriptors and the
// dtype mapping.
//
// Why a lock per handle: a cuDNN handle carries its stream (cudnnSetStream), so "set the
// current stream, then enqueue" must not interleave with another thread doing the same on the
// same device. CudnnLease holds the device's mutex for the duration of one op's calls (host-side
// enqueue only: microseconds). Handles are created on first use and never destroyed (they would
// otherwise be torn down during static destruction, after the CUDA context may be gone).
//
// cuDNN API status: these ops use cuDNN's "legacy" descriptor API (cudnnConvolution*,
// cudnnBatchNormalization*, cudnnPooling*, cudnnSetFilter4dDescriptor, ...). cuDNN 9 marks it
// deprecated in favour of the graph API but ships it in every 9.x release; the deprecation
// attribute is only active with CUDNN_WARN_DEPRECATED, which we do not define.
#pragma once

#if STOKER_WITH_CUDA
#include <cudnn.h>

#include <mutex>

#include "core/cuda_util.h"
#include "stoker/core/dtype.h"
#include "stoker/ops/layout.h"

namespace stoker::ops::cuda {

cudnnDataType_t cudnn_dtype(DType t);

inline cudnnTensorFormat_t cudnn_format(Layout l) {
  return l == Layout::nchw ? CUDNN_TENSOR_NCHW : CUDNN_TENSOR_NHWC;
}

// Exclusive use of device d's handle, bound to the calling thread's current stream of d. The
// caller holds a DeviceScope for d.
class CudnnLease {
 public:
  explicit CudnnLease(Device d);
  cudnnHandle_t handle() const { return handle_; }

 private:
  std::unique_lock<std::mutex> lock_;
  cudnnHandle_t handle_ = nullptr;
};

class TensorDesc {
 public:
  TensorDesc() { STOKER_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d_)); }
  // A 4-D tensor with logical extents (n, c, h, w) stored in `layout`.
  TensorDesc(DType t, Layout layout, int64_t n, int64_t c, int64_t h, int64_t w) : TensorDesc() {
    set(t, layout, n, c, h, w);
  }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d_); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;

  void set(DType t, Layout layout, int64_t n, int64_t c, int64_t h, int64_t w);
  cudnnTensorDescriptor_t get() const { return d_; }

 private:
  cudnnTensorDescriptor_t d_ = nullptr;
};

// Checks that an extent fits cuDNN's int arguments.
int cudnn_int(int64_t v, const char* what);

}  // namespace stoker::ops::cuda
#endif
