// The FLOP model of a GPT training step and the MFU it gives (docs/benchmarks.md states it):
// per token, 6 N for the matrix multiplies over every parameter (2 in forward, 4 in backward;
// the tied head's V x C weight is one of them, the embedding lookups cost nothing) plus
// 12 L C T for attention's two T-long products per layer (QK^T and PV, forward and backward,
// causal masking not subtracted) — the model of nanoGPT, llm.c and the PyTorch peer
// (benchmarks/peers/torch_train.py), so MFUs compare.
#pragma once

#include <cstdint>

#include "gpt_model.h"

namespace stoker::gpt {

inline double training_flops_per_token(const GptConfig& c, int64_t params, int64_t context) {
  return 6.0 * static_cast<double>(params) + 12.0 * static_cast<double>(c.layers) *
                                                 static_cast<double>(c.d_model) *
                                                 static_cast<double>(context);
}

// Model FLOP utilization: achieved FLOP/s over the device's dense peak for the step's dtype
// (`peak_tflops` <= 0: unknown, returns -1).
inline double mfu(double tokens_per_s, double flops_per_token, double peak_tflops) {
  return peak_tflops > 0 ? tokens_per_s * flops_per_token / (peak_tflops * 1e12) : -1.0;
}

}  // namespace stoker::gpt
