#include "core/graph.h"

#include "stoker/core/allocator.h"
#include "stoker/core/error.h"

#include "core/cuda_util.h"

namespace stoker::core {

CudaGraph CudaGraph::capture(const Stream& stream, const std::function<void()>& fn) {
#if STOKER_WITH_CUDA
  STOKER_CHECK(stream.is_cuda(), "CudaGraph::capture: needs a CUDA stream, got the CPU stream");
  const DeviceScope scope(stream.device().index);
  const auto s = static_cast<cudaStream_t>(stream.handle());
  STOKER_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  detail::begin_capture_frees(s);
  const detail::GraphBlocks before = detail::live_graph_blocks();
  cudaGraph_t graph = nullptr;
  try {
    const StreamGuard guard(stream);
    fn();
  } catch (...) {
    // End the capture so the stream is usable again; the graph is discarded.
    if (cudaStreamEndCapture(s, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    detail::end_capture_frees();
    throw;
  }
  const cudaError_t e = cudaStreamEndCapture(s, &graph);
  detail::end_capture_frees();
  const detail::GraphBlocks after = detail::live_graph_blocks();
  if (e != cudaSuccess || graph == nullptr) {
    cudaGetLastError();
    STOKER_THROW("CudaGraph::capture: the capture on ", stream.device().str(),
                 " failed: ", cudaGetErrorString(e),
                 ". The captured code made a call that is not allowed while capturing — usually a "
                 "host synchronization (Tensor::item, to(cpu), Stream::synchronize, a blocking "
                 "copy) or a cudaMalloc; find it and keep the value on the device");
  }
  CudaGraph g;
  g.graph_ =
      std::shared_ptr<void>(graph, [](void* p) { cudaGraphDestroy(static_cast<cudaGraph_t>(p)); });
  size_t nodes = 0;
  STOKER_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  g.nodes_ = nodes;
  g.held_blocks_ = after.count - before.count;
  g.held_bytes_ = after.bytes - before.bytes;
  cudaGraphExec_t exec = nullptr;
  STOKER_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  g.exec_ = exec;
  g.exec_owner_ = std::shared_ptr<void>(
      exec, [](void* p) { cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(p)); });
  g.device_ = stream.device();
  return g;
#else
  (void)stream;
  (void)fn;
  STOKER_THROW("CudaGraph::capture: stoker was built without CUDA");
#endif
}

void CudaGraph::launch(const Stream& stream) const {
  STOKER_CHECK(exec_ != nullptr, "CudaGraph::launch: the graph is empty; create it with capture()");
#if STOKER_WITH_CUDA
  STOKER_CHECK(stream.is_cuda() && stream.device() == device_,
               "CudaGraph::launch: the graph "
               "belongs to ",
               device_.str(), " but the stream is on ", stream.device().str());
  const DeviceScope scope(device_.index);
  STOKER_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_),
                                    static_cast<cudaStream_t>(stream.handle())));
#else
  (void)stream;
#endif
}

}  // namespace stoker::core
