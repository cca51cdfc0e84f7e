// Private: the per-backend entry points behind the public ops. The public functions in
// src/ops/*.cpp validate their inputs and dispatch on the device; the functions here may
// assume valid, contiguous, same-device inputs.
//   cpu::  src/ops/cpu/*.cpp   oneTBB-parallel reference implementations (GEMM through BLAS)
//   cuda:: kernels/*.cu and src/ops/cuda/*.cpp, enqueued on the current stream of the device
#pragma once

#include <cstdint>
#include <span>

#include "stoker/core/tensor.h"
#include "stoker/ops/gemm.h"
#include "stoker/ops/reduce.h"

namespace stoker::ops {

#define STOKER_OPS_BACKEND_DECLS                                                               \
  void fill(const Tensor& out, double value);                                                  \
  void cast(const Tensor& dst, const Tensor& src); /* float dtypes; also same-dtype copy */    \
  void add(const Tensor& out, const Tensor& a, const Tensor& b);                               \
  void mul(const Tensor& out, const Tensor& a, const Tensor& b);                               \
  void axpy(const Tensor& y, float alpha, const Tensor& x);                                    \
  void scale(const Tensor& x, float alpha);                                                    \
  /* out: rank-0 f32 tensor on the same device */                                              \
  void reduce(std::span<const Tensor> xs, Reduction r, const Tensor& out);                     \
  void gemm(const Tensor& c, const Tensor& a, const Tensor& b, const GemmOptions& o);          \
  void random_uniform(const Tensor& out, float lo, float hi, uint64_t seed, uint64_t offset);  \
  void random_normal(const Tensor& out, float mean, float std, uint64_t seed, uint64_t offset);

namespace cpu {
STOKER_OPS_BACKEND_DECLS
}  // namespace cpu

namespace cuda {
STOKER_OPS_BACKEND_DECLS
}  // namespace cuda

#undef STOKER_OPS_BACKEND_DECLS

// Runs backend function `fn` for the device (validated before: CUDA tensors only reach here in
// CUDA builds).
#if STOKER_WITH_CUDA
#define STOKER_DISPATCH(device, fn, ...) \
  ((device).is_cuda() ? cuda::fn(__VA_ARGS__) : cpu::fn(__VA_ARGS__))
#else
#define STOKER_DISPATCH(device, fn, ...) cpu::fn(__VA_ARGS__)
#endif

}  // namespace stoker::ops
