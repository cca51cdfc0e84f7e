// Optimizer update kernels over a whole list of parameters (one launch for all; three for LARS),
// PyTorch's SGD / AdamW formulas and MLPerf's LARS. params, grads and state: f32, pairwise the
// same shape, one device. `found_inf` (optional, rank-0 f32) skips the update on the device; an
// optional rank-0 f32 `lr` tensor replaces the host value (a CUDA graph's schedule).
// Details: docs/ops.md#optimizers-and-schedules.
#pragma once

#include <cstdint>
#include <span>

#include "stoker/core/tensor.h"

namespace stoker::ops {

struct SgdHyper {
  float lr = 0.01f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  bool first_step = false;  // the momentum buffer is initialised to the gradient
};

//   g = grad + weight_decay * p
//   if momentum: buf = first_step ? g : momentum * buf + (1 - dampening) * g
//                g = nesterov ? g + momentum * buf : buf
//   p -= lr * g
// momentum_bufs may be empty when momentum == 0. `lr` (optional): the device learning rate.
void sgd_step(std::span<const Tensor> params, std::span<const Tensor> grads,
              std::span<const Tensor> momentum_bufs, const SgdHyper& h,
              const Tensor& found_inf = {}, const Tensor& lr = {});

struct LarsHyper {
  float lr = 0.1f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
  float eta = 0.001f;    // trust coefficient
  float epsilon = 0.0f;  // added to the trust ratio's denominator
};

// LARS (You, Gitman & Ginsburg 2017) in the form of the MLPerf ResNet-50 reference
// (TensorFlow's LARSOptimizer, NVIDIA's MXNet "sgdwfastlars"): the learning rate is applied
// inside the momentum. Per tensor, with ||.|| the L2 norm over the whole tensor:
//   adapt[i] != 0:
//     trust = eta * ||p|| / (||g|| + weight_decay * ||p|| + epsilon)  if ||p|| > 0 and ||g|| > 0
//             1                                                       otherwise
//     buf = momentum * buf + (lr * trust) * (g + weight_decay * p)
//   adapt[i] == 0 (biases, normalization gamma/beta): no trust ratio, no weight decay
//     buf = momentum * buf + lr * g
//   p -= buf
// momentum_bufs are required (zeros before the first step). The norms are reduced on the
// parameters' device (GPU: f32 partial sums in a fixed order, deterministic; CPU: f64), the
// trust ratios stay there (no host sync). `lr` (optional): the device learning rate, read by
// the trust-ratio pass.
void lars_step(std::span<const Tensor> params, std::span<const Tensor> grads,
               std::span<const Tensor> momentum_bufs, std::span<const uint8_t> adapt,
               const LarsHyper& h, const Tensor& found_inf = {}, const Tensor& lr = {});

struct AdamWHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 1e-2f;
  int64_t step = 1;  // 1-based step number after this update (bias correction)
};

// AdamW's step count and bias corrections held on the device (a u8 tensor of
// sizeof(AdamWStepState) bytes from adamw_step_state_create): advanced by adamw_step only when
// found_inf is clear, so an overflowed step neither updates nor counts. Without it, the host
// passes AdamWHyper::step.
struct AdamWStepState {
  int64_t step;      // updates applied
  double beta1_pow;  // beta1^step
  double beta2_pow;  // beta2^step
  float step_size;   // lr / (1 - beta1^step) of the last update
  float bc2_sqrt;    // sqrt(1 - beta2^step)
};
Tensor adamw_step_state_create(Device device);
// The step count it holds (a host sync when on a GPU).
int64_t adamw_step_state_steps(const Tensor& state);

//   p *= 1 - lr * weight_decay
//   m = beta1 * m + (1 - beta1) * g ;  v = beta2 * v + (1 - beta2) * g^2
//   p -= (lr / (1 - beta1^step)) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
// With `step_state` (see above) h.step is ignored and the step is counted on the device.
// `compute_copies` (optional: empty, or one per parameter, undefined for none): f16 or bf16
// tensors of the parameters' shapes — mixed precision's half compute copies — written with the
// updated value (rounded to nearest even, as cast_multi) in the update's own pass, instead of a
// second pass that reads every parameter again. The defined ones share one dtype. Skipped with
// the update when found_inf is set.
// `lr` (optional, needs step_state): the device learning rate (above).
void adamw_step(std::span<const Tensor> params, std::span<const Tensor> grads,
                std::span<const Tensor> exp_avgs, std::span<const Tensor> exp_avg_sqs,
                const AdamWHyper& h, const Tensor& found_inf = {}, const Tensor& step_state = {},
                std::span<const Tensor> compute_copies = {}, const Tensor& lr = {});

// ---- compact (low-precision) optimizer state ----
//
// The same updates with each state tensor stored in one of three forms, chosen per parameter
// by the dtype of `values`:
//   f32  as above (bit-identical to the f32 overloads);
//   bf16 loaded exactly, updated in f32, stored rounded to nearest even, or stochastically
//        (StateStorage::stochastic_rounding) with Philox bits that the CPU and GPU draw alike;
//   u8   block-wise 8-bit codes with `absmax` (f32, one per block of StateStorage::block values,
//        ops/quantize.h): a block is decoded, updated in f32, and re-encoded with its new
//        absmax. exp_avg and momentum use the signed dynamic map, exp_avg_sq the unsigned one.
// The parameter update itself reads the f32 values of this step (before re-encoding). The
// states of one parameter (exp_avg and exp_avg_sq) share a form. CPU and GPU produce identical
// parameters, bf16 bits and codes (kernels/optim.cu is compiled with -fmad=false).
struct StateTensor {
  Tensor values;  // f32 | bf16 | u8 codes, the parameter's shape
  Tensor absmax;  // u8 values only: f32 [quantization_blocks(numel, block)]
};

struct StateStorage {
  int64_t block = 2048;              // values per absmax of u8 states (multiple of 256, <= 4096)
  bool stochastic_rounding = false;  // bf16 states: round stochastically instead of to nearest
  // This step's rounding draws: element gi (counted over the whole list, in order) uses
  // Philox (seed, its own stream, block offset + gi / 4), lane gi % 4; the first state takes
  // the low 16 bits, the second the high 16. The caller advances offset by
  // ceil(total elements / 4) per step.
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// momentum_bufs must be given (momentum > 0 is required).
void sgd_step(std::span<const Tensor> params, std::span<const Tensor> grads,
              std::span<const StateTensor> momentum_bufs, const SgdHyper& h,
              const StateStorage& storage, const Tensor& found_inf = {});

void adamw_step(std::span<const Tensor> params, std::span<const Tensor> grads,
                std::span<const StateTensor> exp_avgs, std::span<const StateTensor> exp_avg_sqs,
                const AdamWHyper& h, const StateStorage& storage, const Tensor& found_inf = {},
                const Tensor& step_state = {});

}  // namespace stoker::ops

// Small device-side pieces of a training step that must not sync the host: gradient clipping
namespace stoker::ops {

// xs *= min(1, max_norm / (total_norm + 1e-6)), the factor computed on the device from the
// rank-0 f32 `total_norm` (PyTorch's clip_grad_norm_). xs are f32, on total_norm's device.
void clip_by_total_norm(std::span<const Tensor> xs, const Tensor& total_norm, float max_norm);

// Dynamic loss scaling, kept entirely on the device (amp::GradScaler drives these).
//
// grads *= 1 / scale (the reciprocal taken in double, as PyTorch does) and found_inf = 1 when any
// element of any gradient is NaN or Inf. found_inf is only ever set, never cleared: zero it
// before the first call of a step. One launch for the whole list on the GPU. grads are f32.
void unscale_and_check(std::span<const Tensor> grads, const Tensor& scale, const Tensor& found_inf);

struct ScaleUpdate {
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  int64_t growth_interval = 2000;
  int32_t hysteresis = 1;  // overflows tolerated (step skipped, scale kept) before backing off
  float min_scale = 0.0f;  // the scale never goes below; reaching it sets state[2]
};

// The scale update after a step, decided on the device from found_inf. `state` is i32[3]:
// {growth_tracker (clean steps since the last change), hysteresis_left, hit_min_scale}.
//   overflow: growth_tracker = 0; if hysteresis_left > 1 it is decremented (scale kept), else
//             scale *= backoff_factor, clamped to min_scale (then hit_min_scale = 1)
//   clean:    growth_tracker += 1; when it reaches growth_interval: scale *= growth_factor (if
//             the result is finite), growth_tracker = 0, hysteresis_left = hysteresis
void update_scale(const Tensor& scale, const Tensor& state, const Tensor& found_inf,
                  const ScaleUpdate& u);

// What the loss monitor keeps on the device (a u8 tensor of sizeof(LossMonitorState) bytes).
struct LossMonitorState {
  double loss_sum;         // finite step losses since the last reset
  int64_t steps;           // how many were summed
  float last_finite_loss;  // the most recent finite step loss
  int64_t last_finite_step;
  int64_t first_bad_step;  // first step whose loss was NaN/Inf; -1 while none
};

// A zeroed monitor (first_bad_step = -1) on `device`.
Tensor loss_monitor_create(Device device);
// Folds the rank-0 f32 `loss` of optimizer step `step` into the monitor. `step_device`
// (optional, a rank-0 i64 tensor on the monitor's device) replaces `step`: a step captured in a
// CUDA graph reads its number there, written by the host before each replay.
void loss_monitor_update(const Tensor& monitor, const Tensor& loss, int64_t step,
                         const Tensor& step_device = {});
// Reads the monitor on the host (a sync when on a GPU) and, with `reset`, zeroes the sum.
LossMonitorState loss_monitor_read(const Tensor& monitor, bool reset);

}  // namespace stoker::ops
