#include "train/step_graph.h"

#include <fmt/format.h>
#include <cstdio>

#include "stoker/core/allocator.h"
#include "stoker/core/error.h"
#include "stoker/core/op_listener.h"
#include "stoker/core/stream.h"
#include "stoker/ops/layout.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/trainer.h"
#include "train/trainer_impl.h"

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
    held_ = fmt::format("{}{}{})", n, n == 1 ? " tensor (" : " tensors (",
                        core::format_bytes(static_cast<size_t>(graph_.held_bytes())));
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

void check_graph_options(const TrainerOptions& options, const optim::Optimizer& optimizer,
                         Device device) {
  STOKER_CHECK(optimizer.supports_device_lr(), "TrainerOptions::cuda_graph: ", optimizer.describe(),
               " cannot read its learning rate on the device, which a replayed step needs; use "
               "SGD, LARS or AdamW with f32 state, or turn the option off");
  STOKER_CHECK(options.cuda_graph_warmup >= 1, "TrainerOptions: cuda_graph_warmup ",
               options.cuda_graph_warmup,
               " must be >= 1 (the first step plans the GEMMs with host syncs, which a capture "
               "cannot hold)");
  STOKER_CHECK(device.is_cuda(), "TrainerOptions::cuda_graph: the model is on ", device.str(),
               "; CUDA graphs need a CUDA device (move the model first, or turn the option off "
               "for CPU training)");
}

std::string cuda_graph_blocker(const optim::Optimizer& optimizer, Device device, int world_size) {
  if (!device.is_cuda()) return "the model is on " + device.str() + ", not a CUDA device";
  if (world_size > 1)
    return fmt::format("the job has {} ranks; the graph step is for one process", world_size);
  if (!optimizer.supports_device_lr())
    return optimizer.describe() + " cannot read its learning rate on the device";
  return "";
}

// The Trainer's step as this graph (TrainerOptions::cuda_graph).
bool Trainer::Impl::graph_step(std::span<const data::Batch> batches, int micro, int k,
                               bool want_norm) {
  // Eager: the warm-up steps (cuBLASLt plans and autotunes each GEMM shape with host syncs, the
  // half compute copies are made), a partial accumulation group, an op-timed step (its ops are
  // timed one by one on the host's side).
  if (graph_warm_steps_ < options_.cuda_graph_warmup || micro < k ||
      core::op_listener() != nullptr) {
    ++graph_warm_steps_;
    eager_step(batches, micro, k, want_norm);
    return false;
  }
  if (graph_eager_) {  // a captured step kept tensors alive: not replayable (see below)
    eager_step(batches, micro, k, want_norm);
    return false;
  }
  if (!graph_) {
    STOKER_CHECK(world_size() == 1, "TrainerOptions::cuda_graph: this job has ", world_size(),
                 " ranks; the graph step is for one process (turn cuda_graph off for data "
                 "parallelism)");
    auto graph = std::make_unique<StepGraph>(model_.device());
    optimizer_.set_lr_tensor(graph->lr());  // throws for an optimizer that cannot
    graph_ = std::move(graph);
  }
  if (graph_->captured() && !graph_->matches(batches)) {  // another shape: this step eagerly
    eager_step(batches, micro, k, want_norm);
    return false;
  }
  if (options_.schedule) optimizer_.set_lr(scheduled_lr());
  const float lr = optimizer_.lr();
  if (graph_->matches(batches)) {  // the common case: one launch
    graph_->replay(batches, lr, step_);
    optimizer_.count_replayed_step();
    ++step_;
    return true;
  }
  // Capture (the first graph step, or the first after a resume): the norm every step when logs
  // or clipping want it (a graph cannot choose per step), in a tensor made before the capture.
  const bool norm = options_.clip_grad_norm > 0.0f || options_.log_grad_norm || want_norm;
  if (norm) {  // a tensor of the Trainer's own, made outside the capture (see apply_step)
    const Tensor last = grad_norm_;
    grad_norm_ = Tensor::zeros({}, DType::f32, model_.device());
    if (last.defined()) ops::copy(grad_norm_, last);
  }
  capturing_ = true;
  try {
    graph_->capture_and_run(batches, lr, step_,
                            [&](std::span<const data::Batch> b) { eager_step(b, k, k, norm); });
  } catch (...) {
    capturing_ = false;
    throw;
  }
  capturing_ = false;
  if (!graph_->held().empty()) {
    // The step ran (once, from its graph); replaying it would fail. Go on eagerly, once said.
    std::fprintf(stderr,
                 "stoker: warning: TrainerOptions::cuda_graph: the captured training step keeps "
                 "%s that it allocated alive after it ends (a module or loss holding a buffer "
                 "from one step to the next), so its graph cannot be replayed; training goes on "
                 "without the graph. Release such tensors by the end of backward, or allocate "
                 "them once outside the step\n",
                 graph_->held().c_str());
    graph_->reset();
    graph_eager_ = true;
  }
  return true;
}

}  // namespace stoker::train
