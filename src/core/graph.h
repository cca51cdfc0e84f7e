// CudaGraph: the work a function queues on a stream, recorded once and replayed with one launch.
//
// Why: a training step of many small kernels is bound by launch latency; a graph replays the
// whole step for the cost of one launch. It is also the proof that a step never waits for the
// host: capture runs in CUDA's global mode, where any call that could synchronize (a blocking
// copy, a stream or event wait, cudaMalloc) makes the capture fail; `capture` then throws with
// CUDA's reason and the hint to look for a host read in the captured code.
//
// Memory: stoker's device allocations are stream-ordered (cudaMallocAsync), which capture turns
// into graph allocation nodes. A block allocated in the graph and freed outside it (a module's
// saved activation, a result the host keeps) must be freed before the graph is launched again,
// so a graph whose step keeps such tensors is launched once per capture; a step that frees
// everything it allocates can be replayed any number of times. Blocks allocated before the
// capture and released during it are freed after the capture ends (not captured). Capture with
// this class, not with cudaStreamBeginCapture directly, so that bookkeeping happens.
//
// The graph belongs to the device of its stream. Not thread-safe. CPU builds: capture throws.
#pragma once

#include <functional>
#include <memory>

#include "stoker/core/stream.h"

namespace stoker::core {

class CudaGraph {
 public:
  CudaGraph() = default;

  // Makes `stream` current for its device, runs `fn` while capturing in global mode, and
  // instantiates the result. `stream` must be a CUDA stream other than the legacy default one.
  static CudaGraph capture(const Stream& stream, const std::function<void()>& fn);

  // Queues one replay on `stream` (same device). Does not wait.
  void launch(const Stream& stream) const;

  bool defined() const { return exec_ != nullptr; }
  // Number of nodes (kernels, copies, memsets, allocations) captured.
  size_t node_count() const { return nodes_; }
  // Blocks the graph allocates that the captured code still held when the capture ended, and
  // their bytes: 0 for a graph that can be launched any number of times (see Memory above).
  int64_t held_blocks() const { return held_blocks_; }
  int64_t held_bytes() const { return held_bytes_; }

 private:
  std::shared_ptr<void> graph_;  // cudaGraph_t
  void* exec_ = nullptr;         // cudaGraphExec_t, owned through exec_owner_
  std::shared_ptr<void> exec_owner_;
  Device device_{};
  size_t nodes_ = 0;
  int64_t held_blocks_ = 0, held_bytes_ = 0;
};

}  // namespace stoker::core

namespace stoker {
using core::CudaGraph;
}  // namespace stoker
