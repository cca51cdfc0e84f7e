// Private to the Trainer: TrainerOptions::cuda_graph. The whole training step — forward, loss,
// backward, unscale, clipping, optimizer, scaler update, loss monitor — recorded once as a CUDA
// graph (core::CudaGraph) and replayed with one launch per step.
//
// What a replay cannot take from the host it reads from the device: the batch from buffers the
// graph was captured on (each step's batch is copied into them first), the learning rate and
// the step number from two device scalars written before the launch (the optimizer and the
// loss monitor read them there). Everything the captured step allocates must be freed inside it
// for it to be launched again (a step that keeps some is run once and then eagerly); memory it
// allocates stays reserved by the graph between launches.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/graph.h"
#include "stoker/data/batch_source.h"

namespace stoker::optim {
class Optimizer;
}  // namespace stoker::optim

namespace stoker::train {

struct TrainerOptions;

// TrainerOptions::cuda_graph, refused when the Trainer is built rather than after the warm-up
// steps: an optimizer that cannot read its learning rate on the device, no warm-up step, a
// device that is not a CUDA one.
void check_graph_options(const TrainerOptions& options, const optim::Optimizer& optimizer,
                         Device device);

class StepGraph {
 public:
  explicit StepGraph(Device device);

  bool captured() const { return graph_.defined(); }
  // True when a step was captured on batches of these shapes and dtypes (so it can replay).
  bool matches(std::span<const data::Batch> batches) const;
  // Records `step` run on the graph's own copies of `batches` (the argument `step` gets), then
  // launches it once: this step. Replaces an earlier capture. A step that keeps tensors it
  // allocated alive after it ends runs, but its graph is not replayable (held() says what).
  // The Trainer then goes on eagerly.
  void capture_and_run(std::span<const data::Batch> batches, float lr, int64_t step_number,
                       const std::function<void(std::span<const data::Batch>)>& step);
  // One more step: copies `batches` in, writes the learning rate and step number, launches.
  void replay(std::span<const data::Batch> batches, float lr, int64_t step_number);
  // Forgets the capture (weights reloaded, shapes changed for good).
  void reset();

  // The device scalars the captured step reads: f32 learning rate, i64 step number.
  const Tensor& lr() const { return lr_; }
  const Tensor& step_number() const { return step_; }
  size_t node_count() const { return graph_.node_count(); }
  // "3 tensors (1.50 MiB)": what the last captured step kept alive after it ended (empty: the
  // graph replays).
  const std::string& held() const { return held_; }

 private:
  void load(std::span<const data::Batch> batches, float lr, int64_t step_number);

  Device device_;
  std::vector<data::Batch> static_;  // the batches the graph reads
  core::CudaGraph graph_;
  Tensor lr_, step_;
  std::string held_;
};

}  // namespace stoker::train
