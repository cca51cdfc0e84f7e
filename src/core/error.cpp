#include "stoker/core/error.h"

#include <lmdb.h>

#include <atomic>
#include <cstring>

#if STOKER_WITH_CUDA
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>
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

namespace {
[[noreturn]] void library_error(const char* lib, const char* expr, int status, const char* msg,
                                const char* file, int line, std::string hint) {
  throw Error(str(lib, " call `", expr, "` failed with status ", status, ": ", msg),
              where(file, line) + current_cuda_device(), std::move(hint));
}
}  // namespace

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

void check_cublas(int status, const char* expr, const char* file, int line) {
  if (status == 0) return;
#if STOKER_WITH_CUDA
  library_error("cuBLAS", expr, status,
                cublasLtGetStatusString(static_cast<cublasStatus_t>(status)), file, line,
                status == CUBLAS_STATUS_NOT_SUPPORTED
                    ? "this dtype/shape/alignment combination is not supported by cuBLASLt"
                    : "");
#else
  library_error("cuBLAS", expr, status, "cuBLAS error", file, line, {});
#endif
}

void check_cudnn(int status, const char* expr, const char* file, int line) {
  if (status == 0) return;
#if STOKER_WITH_CUDA
  library_error("cuDNN", expr, status, cudnnGetErrorString(static_cast<cudnnStatus_t>(status)),
                file, line, {});
#else
  library_error("cuDNN", expr, status, "cuDNN error", file, line, {});
#endif
}

void check_nccl(int status, const char* expr, const char* file, int line) {
  if (status == 0) return;
#if STOKER_WITH_CUDA
  library_error("NCCL", expr, status, ncclGetErrorString(static_cast<ncclResult_t>(status)), file,
                line, "set NCCL_DEBUG=INFO for NCCL's own account of what went wrong");
#else
  library_error("NCCL", expr, status, "NCCL error", file, line, {});
#endif
}

void check_lmdb(int status, const char* expr, const char* file, int line) {
  if (status == 0) return;
  std::string hint;
  if (status == ENOENT) hint = "the LMDB dataset does not exist: build it with `stoker pack`";
  if (status == MDB_MAP_FULL) hint = "the LMDB map is full: pack with a larger --map-size";
  library_error("LMDB", expr, status, mdb_strerror(status), file, line, hint);
}

}  // namespace detail
}  // namespace stoker::core
