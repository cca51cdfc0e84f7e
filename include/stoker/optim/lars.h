// LARS: SGD with momentum and a layer-wise trust ratio, for large-batch training (You, Gitman &
// Ginsburg, "Large Batch Training of Convolutional Networks", 2017), with the update of the
// MLPerf ResNet-50 reference (the TensorFlow reference's LARSOptimizer; MXNet's LARS, which
// NVIDIA's submissions use, has the same formulas): the learning rate is applied inside the
// momentum.
//
// For each trainable parameter w with gradient g (norms ||.|| over the whole tensor), v its
// momentum (zero before the first step):
//   adapted (by default every parameter of two or more dimensions: convolution and linear
//   weights):
//     trust = eta * ||w|| / (||g|| + weight_decay * ||w|| + epsilon)  if ||w|| > 0 and ||g|| > 0
//             1                                                        otherwise
//     v = momentum * v + (lr * trust) * (g + weight_decay * w)
//   excluded (LarsOptions::exclude; by default the parameters of at most one dimension —
//   biases, batch-norm gamma and beta — as the reference's skip list of batch-norm and bias
//   variables): plain momentum SGD, no trust ratio, no weight decay:
//     v = momentum * v + lr * g
//   w -= v
// Because lr enters v, a change of the learning rate acts over the next steps through the
// momentum (the reference's behaviour), unlike torch.optim.SGD, whose momentum is lr-free. The
// MLPerf settings: eta 0.001, epsilon 0, momentum 0.9, weight decay 5e-5 (NVIDIA's ResNet-50
// runs, with label smoothing 0.1 and optim::polynomial_with_warmup's schedule).
//
// Devices (ops::lars_step): on a GPU three launches per step — the squared norms of every adapted
// tensor, the trust ratios, the update — with the norms and ratios kept on the device, so a step
// never synchronizes the host; the learning rate is the host value of set_lr (the schedule's), as
// for SGD, or the device scalar of set_lr_tensor (a step captured in a CUDA graph). An overflowed
// step (set_found_inf's flag non-zero) is skipped on the device and leaves parameters and momentum
// untouched. The CPU sums the norms in f64, the GPU in f32 (a fixed order, the same bits on every
// run): the two agree to float rounding, not bit for bit.
//
// State: "<param>.momentum", f32, one per trainable parameter (state() / load_state(), so
// checkpoints resume; an SGD checkpoint, whose buffer is "momentum_buffer" and lr-free, is
// refused). Compact state formats (StateFormat) are not implemented for LARS.
// Not for dist::ShardedOptimizer (ZeRO-1), whose inner optimizer sees slices of gradient buckets
// and so could not take a parameter's norm: it refuses LARS (needs_whole_parameters()). With
// optim::OffloadedOptimizer every parameter stays whole and LARS runs on the CPU.
// Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "stoker/optim/optimizer.h"

namespace stoker::optim {

// Which parameters LARS leaves out of the trust ratio and the weight decay.
using LarsExclude = std::function<bool(const std::string& name, const nn::Parameter& p)>;

// True for parameters of at most one dimension: biases, normalization gamma and beta.
bool one_dimensional(const std::string& name, const nn::Parameter& p);

struct LarsOptions {
  float lr = 0.1f;  // set by the schedule each step (NVIDIA's ResNet-50: 10.5 at batch 3264)
  float momentum = 0.9f;
  float weight_decay = 5e-5f;
  float eta = 0.001f;    // trust coefficient
  float epsilon = 0.0f;  // added to the trust ratio's denominator
  // Excluded parameters get plain momentum SGD without weight decay; empty: none excluded.
  LarsExclude exclude = one_dimensional;
};

class LARS : public Optimizer {
 public:
  LARS(NamedParameters params, LarsOptions options = {});
  std::string describe() const override;
  bool needs_whole_parameters() const override { return true; }
  bool supports_device_lr() const override { return true; }
  // Whether the trainable parameter `name` is adapted (trust ratio and weight decay); throws for
  // a name that is not a trainable parameter of this optimizer.
  bool adapted(const std::string& name) const;
  // Adapted trainable parameters, out of how many.
  int64_t adapted_count() const;
  int64_t trainable_count() const;

 protected:
  void update() override;

 private:
  LarsOptions options_;
  std::vector<uint8_t> adapt_;  // one per entry of params_ (1: adapted)
  std::vector<ops::StateTensor>* momentum_ = nullptr;
};

}  // namespace stoker::optim
