#include "stoker/core/error.h"

#include <fmt/format.h>
#include <atomic>
#include <cstring>

#if STOKER_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace stoker::core {

namespace {
std::string compose(const std::string& what, const std::string& where, const std::string& hint) {
  std::string s = what + " (at " + where + ")";
  if (!hint.empty()) s += "\n  hint: " + hint;
  return s;
}

std::string current_cuda_device() {
#if STOKER_WITH_CUDA
  int d = -1;
  if (cudaGetDevice(&d) == cudaSuccess) return ", cuda:" + std::to_string(d);
  cudaGetLastError();
#endif
  return {};
}
}  // namespace

Error::Error(std::string what, std::string where, std::string hint)
    : std::runtime_error(compose(what, where, hint)),
      message_(std::move(what)),
      where_(std::move(where)),
      hint_(std::move(hint)) {}

namespace detail {

std::atomic<int> g_process_rank{-1};

std::string where(const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  std::string s = std::string(base ? base + 1 : file) + ":" + std::to_string(line);
  const int rank = g_process_rank.load(std::memory_order_relaxed);
  if (rank >= 0) s += ", rank " + std::to_string(rank);
  return s;
}

void throw_error(const char* file, int line, std::string what, std::string hint) {
  throw Error(std::move(what), where(file, line), std::move(hint));
}

void library_error(const char* lib, const char* expr, int status, const char* msg, const char* file,
                   int line, std::string hint) {
  throw Error(fmt::format("{} call `{}` failed with status {}: {}", lib, expr, status, msg),
              where(file, line) + current_cuda_device(), std::move(hint));
}

void check_cuda(int status, const char* expr, const char* file, int line) {
  if (status == 0) return;
#if STOKER_WITH_CUDA
  const auto err = static_cast<cudaError_t>(status);
  cudaGetLastError();  // clear the sticky-free error so later calls are not blamed
  std::string hint;
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver)
    hint = "no usable GPU/driver: check nvidia-smi, or run on the CPU (Device::cpu())";
  else if (err == cudaErrorNoKernelImageForDevice)
    hint =
        "this GPU's architecture was not compiled in: reconfigure with "
        "-DCMAKE_CUDA_ARCHITECTURES=<your sm> (e.g. 80 for A100, 90 for H100/H200)";
  else if (err == cudaErrorMemoryAllocation)
    hint = "out of GPU memory: lower the batch size or enable activation checkpointing";
  library_error("CUDA", expr, status, cudaGetErrorString(err), file, line, hint);
#else
  library_error("CUDA", expr, status, "CUDA error", file, line, {});
#endif
}

}  // namespace detail
}  // namespace stoker::core
