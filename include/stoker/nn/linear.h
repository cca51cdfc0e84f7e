// Linear: y = x W^T + b, with W [out, in] and b [out] (PyTorch's layout and names "weight",
// "bias", so weights load into torch.nn.Linear). x is [N, in] (leading dims flattened) and y
// [N, out]. Initialization as PyTorch: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias.
// Mixed precision: an f16/bf16 input runs the GEMMs in that dtype with fp32 accumulation and
// the weight's half compute copy (Parameter::compute_value, refreshed by the optimizer after
// each step); the weight gradient is written in fp32 by the backward GEMM (beta 0 right after
// zero_grad, then 1: micro-batches accumulate in place). Bias and its gradient stay fp32; the
// bias gradient comes out of the weight-gradient GEMM (ops::GemmOptions::bias_grad: on the GPU
// cuBLASLt's epilogue, no separate pass over dy).
//
// Fused activation (set_activation(Activation::gelu)): y = gelu(x W^T + b), tanh form — an
// nn::Linear followed by an nn::GELU in one module, the GELU riding in the forward GEMM's
// epilogue (ops::GemmEpilogue::gelu: on the GPU no separate pass over the output). It saves the
// pre-activation x W^T + b (what nn::GELU would have saved) besides its input, and its backward
// takes the gradient of the activated output. The parameters are the Linear's own ("weight",
// "bias"), so a model switches between Linear + GELU and the fused Linear without changing names
// or weight files. Selective recomputation: the output is rebuilt from the saved pre-activation
// (output_recompute() == from_own_state), as nn::GELU rebuilds its output from its input, so
// the next Linear need not keep it.
//
// Backward fusion (set_input_activation_from(&producer)): for a Linear whose input is exactly
// the output of a Linear with a fused activation (an MLP's fc2 after fc), this Linear's input
// gradient GEMM applies the producer's activation derivative in its epilogue
// (ops::GemmEpilogue::dgelu with the producer's saved pre-activation), and the producer's next
// backward takes the result as the gradient of its pre-activation (no gelu_backward pass). If
// the producer kept no pre-activation of a matching shape (or has no activation), the gradient
// is passed on unchanged and the producer applies the derivative itself: always correct. Only
// pair Linears that run forward back to back on the same tensor.
//
// Why a Linear option rather than an MLP module: the GELU belongs to fc's output, so fc stays
// one module with one input (selective recomputation can still release it and have it handed
// back, nn::Checkpoint's recomputation still runs it), names stay "fc.weight" ..., and the
// half compute copies and fp32 gradients are the Linear's own code.
//
// Bits: on the CPU the fused module gives exactly the bits of Linear + GELU (forward and
// backward). On the GPU the epilogue's GELU is computed from the fp32 accumulator before
// rounding (ops/gemm.h), so the output — and what the next layer computes from it — may differ
// from Linear + GELU by an ulp of the compute dtype; the output rebuilt for selective
// recomputation (gelu_forward of the saved, rounded pre-activation) may differ from the
// forward's in the same way, so there gradients match the plain run within rounding rather
// than bit for bit.
//
// FP8 (set_fp8(true), or nn::set_linear_fp8 over a model; what Precision::fp8 turns on): the
// three GEMMs run on FP8 tensor cores (ops::gemm_fp8) — the input and the weight quantized to
// E4M3, the output gradient to E5M2, each with its own delayed scale (nn::Fp8Scaling) — with
// fp32 accumulation, the output and input gradient in the input's dtype, the weight gradient in
// fp32 into the master's gradient as before; bias, GELU epilogues, master weights and the
// optimizer are unchanged. What the backward keeps is the FP8 copies it needs (the input's and
// the weight's codes, transposed: one byte per value) instead of the half input. Those are not
// handed to selective recomputation (release_saved_input says false). On the CPU the same
// arithmetic runs as the reference (dequantized f32 GEMMs); a GPU without FP8 tensor cores is
// refused at the first forward.
#pragma once

#include <optional>

#include "stoker/nn/activation.h"
#include "stoker/nn/fp8_scaling.h"
#include "stoker/nn/module.h"

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
