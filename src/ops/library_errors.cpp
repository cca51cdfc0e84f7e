// The status checks of the libraries that ops links: cuBLASLt and cuDNN (core/error.h).
#include "stoker/core/error.h"

#if STOKER_WITH_CUDA
#include <cublasLt.h>
#include <cudnn.h>
#endif

namespace stoker::core::detail {

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

}  // namespace stoker::core::detail
