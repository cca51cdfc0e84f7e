// cuDNN handles (one per device, created on first use) and descriptor helpers; see
// cudnn_util.h for why each handle is used under a lock.
#include "ops/cuda/cudnn_util.h"

#include <array>
#include <limits>
#include <memory>

namespace stoker::ops::cuda {

namespace {

constexpr int kMaxDevices = 64;

struct DeviceHandle {
  std::mutex mu;
  cudnnHandle_t handle = nullptr;
};

DeviceHandle& device_handle(int index) {
  // Never destroyed: see cudnn_util.h.
  static auto* handles = new std::array<DeviceHandle, kMaxDevices>();
  STOKER_CHECK(index >= 0 && index < kMaxDevices, "internal: bad CUDA device index ", index);
  return (*handles)[static_cast<size_t>(index)];
}

}  // namespace

cudnnDataType_t cudnn_dtype(DType t) {
  switch (t) {
    case DType::f32:
      return CUDNN_DATA_FLOAT;
    case DType::f16:
      return CUDNN_DATA_HALF;
    case DType::bf16:
      return CUDNN_DATA_BFLOAT16;
    default:
      break;
  }
  STOKER_THROW("internal: cuDNN op called with non-float dtype ", dtype_name(t));
}

CudnnLease::CudnnLease(Device d) {
  DeviceHandle& dh = device_handle(d.index);
  lock_ = std::unique_lock<std::mutex>(dh.mu);
  if (!dh.handle) STOKER_CUDNN_CHECK(cudnnCreate(&dh.handle));
  handle_ = dh.handle;
  STOKER_CUDNN_CHECK(cudnnSetStream(handle_, core::cuda_stream(d)));
}

int cudnn_int(int64_t v, const char* what) {
  STOKER_CHECK(v >= 0 && v <= std::numeric_limits<int>::max(), "cuDNN: ", what, " = ", v,
               " does not fit cuDNN's 32-bit extents");
  return static_cast<int>(v);
}

void TensorDesc::set(DType t, Layout layout, int64_t n, int64_t c, int64_t h, int64_t w) {
  STOKER_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d_, cudnn_format(layout), cudnn_dtype(t),
                                                cudnn_int(n, "N"), cudnn_int(c, "C"),
                                                cudnn_int(h, "H"), cudnn_int(w, "W")));
}

}  // namespace stoker::ops::cuda
