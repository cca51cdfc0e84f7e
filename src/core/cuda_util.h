// Private helpers for host code that calls the CUDA runtime (compiled only with CUDA).
#pragma once

#if STOKER_WITH_CUDA
#include <cuda_runtime.h>

#include "stoker/core/error.h"
#include "stoker/core/stream.h"

namespace stoker::core {

// Makes `index` the calling thread's CUDA device for the scope's lifetime.
class DeviceScope {
 public:
  explicit DeviceScope(int index) {
    STOKER_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != index) STOKER_CUDA_CHECK(cudaSetDevice(index));
  }
  ~DeviceScope() { cudaSetDevice(previous_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

// The calling thread's current stream on device `d`, as the runtime's type.
inline cudaStream_t cuda_stream(Device d) {
  return static_cast<cudaStream_t>(current_stream(d).handle());
}

}  // namespace stoker::core
#endif
