// NVTX ranges for Nsight Systems, in the domain "stoker" (docs/diagnostics.md).
//
// NVTX calls do nothing unless a tool (nsys) is attached, so they cost a few nanoseconds; in a
// build without CUDA (or without the NVTX3 headers of the CUDA toolkit) they compile to nothing.
// Ranges are per thread and must nest: push/pop pairs on the same thread, or NvtxRange.
//
// Thread-safety: thread-safe (NVTX ranges are thread-local).
#pragma once

namespace stoker::diag {

// True when this build emits NVTX ranges (CUDA build with the NVTX3 headers).
bool nvtx_enabled();
// Opens a range named `name` (a string that outlives the call is not required).
void nvtx_push(const char* name);
void nvtx_pop();

class NvtxRange {
 public:
  explicit NvtxRange(const char* name) { nvtx_push(name); }
  ~NvtxRange() { nvtx_pop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace stoker::diag
