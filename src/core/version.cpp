#include "stoker/core/version.h"

#include <oneapi/tbb/version.h>

#include "stoker/core/error.h"

#if STOKER_WITH_CUDA
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>
#endif

extern "C" {
// Present in OpenBLAS only; weak so other BLAS libraries link too.
__attribute__((weak)) char* openblas_get_config();
}

namespace stoker::core {

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
    return detail::str(v / major_div, ".", (v % major_div) / minor_div);
  };
  if (cudaRuntimeGetVersion(&v) == cudaSuccess)
    out.push_back({"CUDA runtime", dotted(v, 1000, 10)});
  if (cudaDriverGetVersion(&v) == cudaSuccess && v > 0)
    out.push_back({"CUDA driver (max CUDA)", dotted(v, 1000, 10)});
  else
    out.push_back({"CUDA driver", "none (no GPU driver on this machine)"});
  cudaGetLastError();
  const size_t lt = cublasLtGetVersion();
  out.push_back({"cuBLASLt", detail::str(lt / 10000, ".", (lt % 10000) / 100, ".", lt % 100)});
  const size_t dnn = cudnnGetVersion();
  out.push_back({"cuDNN", detail::str(dnn / 10000, ".", (dnn % 10000) / 100, ".", dnn % 100)});
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess)
    out.push_back({"NCCL", detail::str(nccl / 10000, ".", (nccl % 10000) / 100, ".", nccl % 100)});
#else
  out.push_back({"CUDA", "not built (STOKER_WITH_CUDA=OFF)"});
#endif
  return out;
}

}  // namespace stoker::core
