// NVTX3 is header-only (the CUDA toolkit ships it in include/nvtx3): the first call looks for an
// injected tool (NVTX_INJECTION64_PATH, set by nsys) and otherwise turns every later call into
// a no-op. Nothing to link.
#include "diag/nvtx.h"

#if STOKER_WITH_CUDA && __has_include(<nvtx3/nvToolsExt.h>)
#define STOKER_HAVE_NVTX 1
#include <nvtx3/nvToolsExt.h>
#else
#define STOKER_HAVE_NVTX 0
#endif

namespace stoker::diag {

#if STOKER_HAVE_NVTX
namespace {
nvtxDomainHandle_t domain() {
  static nvtxDomainHandle_t d = nvtxDomainCreateA("stoker");
  return d;
}
}  // namespace

bool nvtx_enabled() { return true; }

void nvtx_push(const char* name) {
  nvtxEventAttributes_t a = {};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = name;
  nvtxDomainRangePushEx(domain(), &a);
}

void nvtx_pop() { nvtxDomainRangePop(domain()); }
#else
bool nvtx_enabled() { return false; }
void nvtx_push(const char*) {}
void nvtx_pop() {}
#endif

}  // namespace stoker::diag
