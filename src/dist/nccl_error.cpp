// The status check of NCCL, which dist links (core/error.h).
#include "stoker/core/error.h"

#if STOKER_WITH_CUDA
#include <nccl.h>
#endif

namespace stoker::core::detail {

void check_nccl(int status, const char* expr, const char* file, int line) {
  if (status == 0) return;
#if STOKER_WITH_CUDA
  library_error("NCCL", expr, status, ncclGetErrorString(static_cast<ncclResult_t>(status)), file,
                line, "set NCCL_DEBUG=INFO for NCCL's own account of what went wrong");
#else
  library_error("NCCL", expr, status, "NCCL error", file, line, {});
#endif
}

}  // namespace stoker::core::detail
