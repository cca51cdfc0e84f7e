#include "stoker/core/device.h"

#include <dlfcn.h>
#include <oneapi/tbb/version.h>

#include <initializer_list>

#include "stoker/core/error.h"

#if STOKER_WITH_CUDA
#include <cuda_runtime.h>
#include <fmt/format.h>
#endif

extern "C" {
// Present in OpenBLAS only; weak so other BLAS libraries link too.
__attribute__((weak)) char* openblas_get_config();
}

namespace stoker::core {

#if STOKER_WITH_CUDA
namespace {
// core links only the CUDA runtime: cuBLASLt and cuDNN belong to ops, NCCL to dist. Their
// versions are asked of the copy the program runs with (already loaded when the program links
// that layer), else of the one the loader would find; nullptr when there is none.
void* library_symbol(const char* symbol, std::initializer_list<const char*> sonames) {
  if (void* f = dlsym(RTLD_DEFAULT, symbol)) return f;
  for (const char* so : sonames)
    if (void* h = dlopen(so, RTLD_LAZY | RTLD_LOCAL))
      if (void* f = dlsym(h, symbol)) return f;  // the handle stays open: f is used after
  return nullptr;
}
std::string dotted3(size_t v) {
  return fmt::format("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100);
}
}  // namespace
#endif

const char* version() { return STOKER_VERSION; }

std::vector<LibraryVersion> library_versions() {
  std::vector<LibraryVersion> out;
  out.push_back({"stoker", STOKER_VERSION});
  out.push_back({"oneTBB", TBB_runtime_version()});
  out.push_back({"BLAS", openblas_get_config ? std::string(openblas_get_config())
                                             : std::string("reference/other (not OpenBLAS)")});
#if STOKER_WITH_CUDA
  int v = 0;
  auto dotted = [](int v, int major_div, int minor_div) {
    return fmt::format("{}.{}", v / major_div, (v % major_div) / minor_div);
  };
  if (cudaRuntimeGetVersion(&v) == cudaSuccess)
    out.push_back({"CUDA runtime", dotted(v, 1000, 10)});
  if (cudaDriverGetVersion(&v) == cudaSuccess && v > 0)
    out.push_back({"CUDA driver (max CUDA)", dotted(v, 1000, 10)});
  else
    out.push_back({"CUDA driver", "none (no GPU driver on this machine)"});
  cudaGetLastError();
  using SizeVersion = size_t (*)();
  if (auto lt = reinterpret_cast<SizeVersion>(library_symbol(
          "cublasLtGetVersion", {"libcublasLt.so", "libcublasLt.so.13", "libcublasLt.so.12"})))
    out.push_back({"cuBLASLt", dotted3(lt())});
  else
    out.push_back({"cuBLASLt", "not found"});
  if (auto dnn = reinterpret_cast<SizeVersion>(
          library_symbol("cudnnGetVersion", {"libcudnn.so", "libcudnn.so.9"})))
    out.push_back({"cuDNN", dotted3(dnn())});
  else
    out.push_back({"cuDNN", "not found"});
  using IntVersion = int (*)(int*);
  int nccl = 0;
  if (auto get = reinterpret_cast<IntVersion>(
          library_symbol("ncclGetVersion", {"libnccl.so", "libnccl.so.2"}));
      get && get(&nccl) == 0)
    out.push_back({"NCCL", dotted3(static_cast<size_t>(nccl))});
#else
  out.push_back({"CUDA", "not built (STOKER_WITH_CUDA=OFF)"});
#endif
  return out;
}

}  // namespace stoker::core
