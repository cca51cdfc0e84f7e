// GEMM: C = alpha * op(A) * op(B) + beta * C, row-major, op(X) = X or X^T; A [M, K], B [K, N]
// (transposed with trans_a / trans_b), C [M, N]. A and B share f32, f16 or bf16; C is f32 or
// that half dtype; accumulation is fp32; beta = 1 accumulates (micro-steps' weight gradients).
// CPU: BLAS. CUDA: cuBLASLt on the current stream. Optional GELU / dGELU epilogues and a bias
// gradient from the same pass (GemmOptions), falling back to the unfused ops' composition.
// Details: docs/ops.md#transformer-fusions.
#pragma once

#include "stoker/core/tensor.h"

namespace stoker::ops {

enum class GemmEpilogue {
  none,   // C = alpha op(A) op(B) + beta C (+ bias)
  gelu,   // aux = alpha op(A) op(B) + bias; C = gelu(aux)
  dgelu,  // C = (alpha op(A) op(B)) * gelu'(aux)
};

struct GemmOptions {
  bool trans_a = false;
  bool trans_b = false;
  float alpha = 1.0f;
  float beta = 0.0f;
  // Optional vector of N (f32, or C's dtype) added to every row in fp32 before the result is
  // rounded to C's dtype: a linear layer's bias, fused into the GEMM's epilogue on the GPU (no
  // extra pass over C). cuBLASLt fuses a bias in C's dtype; an f32 bias with a half C is a
  // separate pass.
  const Tensor* bias = nullptr;
  // A GELU forward or backward (tanh form) applied to the product; gelu and dgelu need aux and
  // beta = 0. CUDA: cuBLASLt's epilogues (the GELU from the fp32 accumulator, so C may differ from
  // the unfused ops by an ulp of C's dtype); CPU, or no cuBLASLt algorithm: the unfused ops.
  GemmEpilogue epilogue = GemmEpilogue::none;
  // gelu: written, the pre-activation; dgelu: read, the forward's pre-activation. [M, N] in C's
  // dtype on C's device. Must be null with GemmEpilogue::none.
  const Tensor* aux = nullptr;
  // Written: sum_k A[k, i] for i < M, an f32 [M] tensor on C's device (ops::bias_grad's sum). Needs
  // trans_a, no bias and epilogue none; not C, A or B.
  const Tensor* bias_grad = nullptr;
};

void gemm(const Tensor& c, const Tensor& a, const Tensor& b, const GemmOptions& options = {});

// Batched GEMM: for every i < batch, C[i] = alpha op(A[i]) op(B[i]) + beta C[i], the matrices
// being the last two dimensions and the batch all leading dimensions flattened (the same for
// a, b and c): a [..., M, K] ([..., K, M] with trans_a), b [..., K, N] ([..., N, K] with
// trans_b), c [..., M, N], each contiguous. dtypes, alpha/beta and accumulation as gemm;
// options.bias, options.aux and options.bias_grad must be null and options.epilogue none.
// CPU: BLAS per matrix, oneTBB over the batch. CUDA: one cuBLASLt call with a batch count and
// strided batch offsets, planned and autotuned per (shape, batch) like gemm. (Attention's
// per-head products, ops/attention.h.)
void gemm_batched(const Tensor& c, const Tensor& a, const Tensor& b,
                  const GemmOptions& options = {});

// fp32 GEMMs on the GPU may use TF32 tensor cores (10-bit mantissa inputs, ~8x faster), as
// PyTorch does with torch.backends.cuda.matmul.allow_tf32. Off by default: fp32 is exact fp32.
void set_allow_tf32(bool allow);
bool allow_tf32();

// CUDA: the first call of each GEMM shape times cuBLASLt's top candidate algorithms on its own
// inputs and keeps the fastest (a few ms and host syncs, once per shape; see
// src/ops/cuda/gemm_cublaslt.cpp). On by default; STOKER_GEMM_AUTOTUNE=0 or
// set_gemm_autotune(false) keeps the heuristic's first pick. Shapes already planned keep theirs.
void set_gemm_autotune(bool on);
bool gemm_autotune();

// FLOPs of one gemm call (2*M*N*K), for throughput reports.
double gemm_flops(int64_t m, int64_t n, int64_t k);

}  // namespace stoker::ops

// The bias parts of a linear layer (the matrix parts are ops::gemm).
namespace stoker::ops {

// y[i, j] += bias[j] for y [N, C] (float dtype) and bias [C] (f32).
void add_bias(const Tensor& y, const Tensor& bias);
// dbias[j] += sum_i dy[i, j] for dy [N, C] (float dtype) and dbias [C] (f32), fp32
// accumulation, deterministic (no atomics across rows).
void bias_grad(const Tensor& dbias, const Tensor& dy);

}  // namespace stoker::ops
