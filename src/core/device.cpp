#include "stoker/core/device.h"

#include <fstream>
#include <mutex>
#include <ostream>
#include <thread>

#include "stoker/core/allocator.h"
#include "stoker/core/error.h"

#if STOKER_WITH_CUDA
#include <cuda_runtime.h>
#include <fmt/format.h>
#endif

namespace stoker::core {

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

std::ostream& operator<<(std::ostream& os, Device d) { return os << d.str(); }

Device parse_device(std::string_view name) {
  if (name == "cpu") return Device::cpu();
  if (name == "cuda" || name == "gpu") return Device::cuda(0);
  if (name.starts_with("cuda:")) {
    const std::string_view idx = name.substr(5);
    // Digits only: "cuda: 1" or "cuda:+1" are typos, not devices.
    const bool digits = !idx.empty() && idx.size() <= 4 &&
                        idx.find_first_not_of("0123456789") == std::string_view::npos;
    STOKER_CHECK(digits, "unknown device '", name, "': expected cpu, cuda or cuda:N");
    return Device::cuda(std::stoi(std::string(idx)));
  }
  STOKER_THROW("unknown device '", name, "': expected cpu, cuda or cuda:N");
}

bool built_with_cuda() { return STOKER_WITH_CUDA != 0; }

int cuda_device_count() {
#if STOKER_WITH_CUDA
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // no driver / no device: not an error for a CPU run
      return 0;
    }
    return n;
  }();
  return count;
#else
  return 0;
#endif
}

Device best_device() { return cuda_device_count() > 0 ? Device::cuda(0) : Device::cpu(); }

namespace {
std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.starts_with("model name")) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}
}  // namespace

int compute_capability(Device d) {
  if (d.is_cpu()) return 0;
#if STOKER_WITH_CUDA
  STOKER_CHECK(d.index < cuda_device_count(), "compute_capability: ", d.str(), " does not exist (",
               cuda_device_count(), " CUDA devices visible)");
  int major = 0, minor = 0;
  STOKER_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d.index));
  STOKER_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d.index));
  return major * 10 + minor;
#else
  STOKER_THROW("compute_capability: ", d.str(), " requested but stoker was built without CUDA");
#endif
}

std::string describe_device(Device d) {
  if (d.is_cpu()) {
    return cpu_model() + " (" + std::to_string(std::thread::hardware_concurrency()) +
           " hardware threads)";
  }
#if STOKER_WITH_CUDA
  STOKER_CHECK(d.index < cuda_device_count(), "describe_device: ", d.str(), " does not exist (",
               cuda_device_count(), " CUDA devices visible)");
  cudaDeviceProp p{};
  STOKER_CUDA_CHECK(cudaGetDeviceProperties(&p, d.index));
  return fmt::format("{} (sm_{}{}, {} SMs, {})", p.name, p.major, p.minor, p.multiProcessorCount,
                     format_bytes(p.totalGlobalMem));
#else
  STOKER_THROW("describe_device: ", d.str(), " requested but stoker was built without CUDA");
#endif
}

}  // namespace stoker::core
