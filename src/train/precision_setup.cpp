#include "train/precision_setup.h"

#include "stoker/core/error.h"
#include "stoker/nn/linear.h"
#include "stoker/nn/loss.h"
#include "stoker/nn/module.h"
#include "stoker/ops/fp8.h"
#include "stoker/optim/optimizer.h"

namespace stoker::train {

std::unique_ptr<amp::GradScaler> apply_precision(amp::Precision precision,
                                                 const amp::GradScalerOptions& scaler_options,
                                                 nn::Module& model, nn::Loss& loss,
                                                 optim::Optimizer& optimizer) {
  // Under mixed precision, layers that make activations from integer inputs (Embedding) emit
  // the compute dtype, so everything after them computes in half precision too.
  nn::set_compute_dtype(model, amp::compute_dtype(precision));
  // Precision::fp8: the Linear layers' GEMMs on FP8 tensor cores (refused on GPUs without).
  if (precision == amp::Precision::fp8) {
    STOKER_CHECK(ops::fp8_gemm_supported(model.device()),
                 "Trainer: Precision::fp8 needs FP8 tensor cores (compute capability 8.9 or newer: "
                 "Ada, Hopper), and ",
                 core::describe_device(model.device()),
                 " has none; train in bf16 there (--precision bf16)");
    STOKER_CHECK(nn::set_linear_fp8(model, true) > 0,
                 "Trainer: Precision::fp8 runs the "
                 "nn::Linear layers in FP8, and ",
                 model.describe(), " has none; train in bf16 (the rest of fp8 is bf16)");
  }
  if (precision != amp::Precision::fp16) {
    loss.set_grad_scale(Tensor());  // a loss reused from an fp16 Trainer
    return nullptr;
  }
  auto scaler = std::make_unique<amp::GradScaler>(model.device(), scaler_options);
  // The loss scale multiplies the loss gradient in fp32 inside the loss's backward kernel,
  // before it is rounded to f16, and never leaves the device.
  loss.set_grad_scale(scaler->scale());
  optimizer.set_found_inf(scaler->found_inf());
  return scaler;
}

}  // namespace stoker::train
