// GEMM: C = alpha * op(A) * op(B) + beta * C, row-major, op(X) = X or X^T.
//
// A is [M, K] (or [K, M] with trans_a), B is [K, N] (or [N, K] with trans_b), C is [M, N].
// A and B share a dtype: f32, f16 or bf16. C is f32, or the inputs' half dtype. Accumulation
// is always fp32. beta = 1 accumulates into C (how weight gradients add up over micro-steps).
//
// CPU: through BLAS (sgemm; half inputs are widened to fp32 first). CUDA: through cuBLASLt on
// the current stream, with a per-stream workspace and a cached algorithm per problem shape.
#pragma once

#include "stoker/core/tensor.h"

namespace stoker::ops {

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
};

void gemm(const Tensor& c, const Tensor& a, const Tensor& b, const GemmOptions& options = {});

// Batched GEMM: for every i < batch, C[i] = alpha op(A[i]) op(B[i]) + beta C[i], the matrices
// being the last two dimensions and the batch all leading dimensions flattened (the same for
// a, b and c): a [..., M, K] ([..., K, M] with trans_a), b [..., K, N] ([..., N, K] with
// trans_b), c [..., M, N], each contiguous. dtypes, alpha/beta and accumulation as gemm;
// options.bias must be null. CPU: BLAS per matrix, oneTBB over the batch. CUDA: one cuBLASLt
// call with a batch count and strided batch offsets, planned and autotuned per (shape, batch)
// like gemm. (Attention's per-head products, ops/attention.h.)
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
