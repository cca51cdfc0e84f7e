// Linear: y = x W^T + b, W [out, in], b [out], PyTorch's names, layout and initialization; x is
// [N, in] (leading dims flattened). Half inputs use the weight's half compute copy and fp32
// accumulation; weight and bias gradients are fp32 and accumulate over micro-batches.
// Fused GELU (set_activation) rides in the forward GEMM's epilogue and saves the pre-activation;
// backward fusion (set_input_activation_from) lets the next Linear apply gelu' in its input-
// gradient GEMM — only pair Linears that run forward back to back on the same tensor. FP8
// (set_fp8) runs the three GEMMs on FP8 tensor cores with delayed scales (nn::Fp8Scaling) and
// keeps the input's and weight's FP8 codes instead of the input. Not thread-safe.
// Details: docs/ops.md#transformer-fusions, docs/mixed_precision.md#fp8.
#pragma once

#include <optional>

#include "stoker/nn/activation.h"
#include "stoker/nn/module.h"
#include "stoker/ops/fp8.h"

// Fp8Scaling: the per-tensor delayed scale of one FP8 tensor of a layer (a Linear's input, weight
namespace stoker::nn {

struct Fp8Options {
  int amax_history = 16;  // uses whose amax the scale follows (>= 1)
  int margin = 0;         // headroom: the scale is divided by 2^margin (0..63)
  bool operator==(const Fp8Options&) const = default;
};

class Fp8Scaling {
 public:
  explicit Fp8Scaling(core::Fp8Format format = core::Fp8Format::e4m3, Fp8Options options = {});

  // What cast() returns: the codes in x's layout and transposed (each with its own scale_inv;
  // codes undefined where not asked for).
  struct Cast {
    ops::Fp8Tensor value;       // [R, C]
    ops::Fp8Tensor transposed;  // [C, R]
  };
  // Quantizes x [R, C] (f32/f16/bf16). new_use: a new use of the tensor (the scale first steps
  // to the history's); false: a recomputation, with the scale of the last use.
  Cast cast(const Tensor& x, bool value, bool transposed, bool new_use = true);

  core::Fp8Format format() const { return format_; }
  const Fp8Options& options() const { return options_; }
  // Rank-0 f32 on the device of the last cast; undefined before the first.
  const Tensor& scale() const { return scale_; }
  // f32 [amax_history], the most recent use first; undefined before the first cast.
  const Tensor& amax_history() const { return history_; }

 private:
  core::Fp8Format format_;
  Fp8Options options_;
  Tensor scale_, history_, amax_;  // amax_: the last cast's, folded in at the next use
  bool primed_ = false;
};

}  // namespace stoker::nn

namespace stoker::nn {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);

  // The fused activation (none by default, or gelu; relu is refused: use nn::ReLU after the
  // Linear); set it before the forward.
  void set_activation(Activation activation);
  Activation activation() const { return activation_; }
  // FP8 GEMMs (see above) on or off; set it before the forward. Turning it on again keeps the
  // scales already learnt unless the options differ.
  void set_fp8(bool on, Fp8Options options = {});
  bool fp8() const { return fp8_.has_value(); }
  // Backward fusion with the Linear that produces this one's input (see above); nullptr: none.
  // The producer must outlive this Linear (siblings in one container do).
  void set_input_activation_from(Linear* producer) { producer_ = producer; }

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  // Saves the input (and the weight's compute copy) without the GEMM.
  void forward_for_backward(const Tensor& x) override;
  // Saves its input (a view, no copy); selective recomputation may take it away and give it
  // back (nn/checkpoint.h).
  bool release_saved_input() override;
  void restore_saved_input(const Tensor& x) override;
  // With a fused activation: the output, rebuilt from the saved pre-activation.
  OutputRecompute output_recompute() const override;
  Tensor recompute_output(const Tensor& x) override;
  std::string describe() const override;

  Parameter& weight() { return weight_; }
  Parameter& bias() { return bias_; }
  bool has_bias() const { return has_bias_; }

 private:
  int64_t in_, out_;
  bool has_bias_;
  Parameter weight_, bias_;
  Tensor x_;          // saved input (2-D view)
  Tensor w_compute_;  // the weight in the input's dtype (the master itself for f32)
  Shape x_shape_;     // the caller's shape, restored for dx
  Activation activation_ = Activation::none;
  Tensor pre_;                          // with an activation: the saved pre-activation [N, out]
  bool grad_is_preactivation_ = false;  // the consumer's backward applied the derivative
  Linear* producer_ = nullptr;          // set_input_activation_from

  // FP8 mode: the scalings of the three FP8 tensors and what the backward keeps.
  struct Fp8State {
    Fp8Scaling input, weight, grad_output;
    ops::Fp8Tensor input_t;    // the input's codes transposed [in, N]: the weight gradient's B
    ops::Fp8Tensor weight_t;   // the weight's codes transposed [in, out]: the input gradient's B
    int64_t rows = 0;          // N of the saved forward
    DType dtype = DType::f32;  // the forward input's dtype
  };
  std::optional<Fp8State> fp8_;
  Tensor forward_fp8(const Tensor& x2d, const Tensor* bias);
  Tensor backward_fp8(const Tensor& dy2);
  void save_fp8_operands(const Tensor& x2d);
  void check_fp8_device() const;
};

// Turns FP8 GEMMs on (or off) for every Linear in the tree; returns how many Linears there are.
int set_linear_fp8(Module& root, bool on, Fp8Options options = {});

// Llama's MLP block, y = down_proj(silu(gate_proj(x)) * up_proj(x)), with the gate and up
// projections as ONE Linear and ONE GEMM: "gate_up_proj" (weight [2F, D], no bias; rows 0..F-1
// are Hugging Face's mlp.gate_proj.weight, rows F..2F-1 its mlp.up_proj.weight, so a weight file
// converter concatenates or splits them along dim 0), ops::swiglu_forward over its [.., 2F]
// output (stoker/ops/activation.h), and "down_proj" (weight [D, F], no bias). D = features,
// F = hidden_features (Llama 3.2-1B: 2048 and 8192). Saved for backward: the Linears' inputs and
// the gate/up output, whose buffer the backward reuses for its gradient (swiglu_backward in
// place), so the block keeps no [.., 2F] tensor beyond it.
class SwiGLU : public Module {
 public:
  SwiGLU(int64_t features, int64_t hidden_features);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string describe() const override;

  Linear& gate_up_proj() { return *gate_up_; }
  Linear& down_proj() { return *down_; }

 private:
  int64_t features_, hidden_;
  Linear* gate_up_;
  Linear* down_;
  Tensor gate_up_out_;  // [.., 2F], the swiglu input; overwritten by its gradient in backward
};

}  // namespace stoker::nn
