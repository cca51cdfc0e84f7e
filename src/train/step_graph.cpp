#include "train/step_graph.h"

#include "stoker/core/allocator.h"
#include "stoker/core/error.h"
#include "stoker/core/stream.h"
#include "stoker/ops/copy.h"

namespace stoker::train {

namespace {
bool same_layout(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  return !a.defined() ||
         (a.shape() == b.shape() && a.dtype() == b.dtype() && a.device() == b.device());
}

Tensor like(const Tensor& t, Device device) {
  return t.defined() ? Tensor::empty(t.shape(), t.dtype(), device) : Tensor();
}
}  // namespace

StepGraph::StepGraph(Device device) : device_(device) {
  STOKER_CHECK(device.is_cuda(), "TrainerOptions::cuda_graph: the model is on ", device.str(),
               "; CUDA graphs need a CUDA device (turn the option off for CPU training)");
  lr_ = Tensor::zeros({}, DType::f32, device);
  step_ = Tensor::zeros({}, DType::i64, device);
}

bool StepGraph::matches(std::span<const data::Batch> batches) const {
  if (!graph_.defined() || !held_.empty() || batches.size() != static_.size()) return false;
  for (size_t i = 0; i < batches.size(); ++i)
    if (!same_layout(batches[i].input, static_[i].input) ||
        !same_layout(batches[i].target, static_[i].target) || batches[i].size != static_[i].size)
      return false;
  return true;
}

void StepGraph::load(std::span<const data::Batch> batches, float lr, int64_t step_number) {
  for (size_t i = 0; i < batches.size(); ++i) {
    ops::copy(static_[i].input, batches[i].input);  // stream-ordered before the launch
    if (static_[i].target.defined()) ops::copy(static_[i].target, batches[i].target);
  }
  ops::fill(lr_, static_cast<double>(lr));  // a kernel argument: no host buffer to race on
  ops::fill(step_, static_cast<double>(step_number));
}

void StepGraph::capture_and_run(std::span<const data::Batch> batches, float lr, int64_t step_number,
                                const std::function<void(std::span<const data::Batch>)>& step) {
  reset();
  for (const data::Batch& b : batches) {
    STOKER_CHECK(b.input.defined() && b.input.device() == device_ &&
                     (!b.target.defined() || b.target.device() == device_),
                 "TrainerOptions::cuda_graph: a batch on ", b.input.defined() ? b.input.str() : "",
                 " but the model is on ", device_.str(),
                 "; create the data source with .device = ", device_.str());
    static_.push_back({like(b.input, device_), like(b.target, device_), b.size});
  }
  load(batches, lr, step_number);
  const Stream stream = core::compute_stream(device_);
  graph_ = core::CudaGraph::capture(stream, [&] { step(static_); });
  // Launched once whatever it holds: this step. A block allocated in the step and still held
  // after it (a module keeping a buffer from one step to the next) is real memory after this
  // launch, but it must be freed before the graph may run again (CUDA would refuse the next
  // launch with a bare "invalid argument"): such a graph is not replayed.
  graph_.launch(stream);
  if (graph_.held_blocks() > 0) {
    const int64_t n = graph_.held_blocks();
    held_ = core::detail::str(n, n == 1 ? " tensor (" : " tensors (",
                              core::format_bytes(static_cast<size_t>(graph_.held_bytes())), ")");
  }
}

void StepGraph::replay(std::span<const data::Batch> batches, float lr, int64_t step_number) {
  STOKER_CHECK(matches(batches), "StepGraph::replay: the batches do not match the capture");
  load(batches, lr, step_number);
  graph_.launch(core::compute_stream(device_));
}

void StepGraph::reset() {
  graph_ = core::CudaGraph();
  static_.clear();
  held_.clear();
}

}  // namespace stoker::train
