// CUDA ReLU, GELU (tanh form) and dropout: one pass over memory, 16-byte accesses where aligned.
//
// Bit-equality with the CPU reference (src/ops/cpu/activation.cpp) is the invariant for f32 and
// for ReLU and dropout in every dtype: the per-element math is the shared ops/nn_math.h (GELU
// through its portable exp, products through mul_rn so nvcc cannot fuse them differently from
// the host), widened and rounded with core/half.h. ReLU/GELU reuse kernel_util.cuh's map kernel
// (reads each input once, writes once).
//
// GELU in bf16/f16 takes a faster path: the portable exp (a degree-7 polynomial) and the IEEE
// division made the kernel compute-bound at about half the copy bandwidth, a visible share of a
// transformer MLP's step. With the hardware exp2 and a fast reciprocal the fp32 value is within
// ~1e-6 relative of the portable one, far below a bf16/f16 ulp, so the rounded outputs agree with
// the CPU's to within one ulp of the output dtype (tests/ops/nn_ops_gpu_test.cpp).
//
// Dropout never stores its mask: thread g draws Philox block offset + g once and applies its
// four uniforms to elements 4g..4g+3 (core/rng.h's element layout), a quarter of the generator
// work of drawing per element, with one Pack load/store of the four when aligned.
#include "kernel_util.cuh"
#include "ops/activation_stubs.h"
#include "ops/nn_math.h"

namespace stoker::ops::cuda {

namespace {

struct ReluOp {
  __device__ float operator()(float x) const { return detail::relu(x); }
};
struct ReluGradOp {  // op(dy, y)
  __device__ float operator()(float dy, float y) const { return detail::relu_grad(dy, y); }
};
struct GeluOp {
  __device__ float operator()(float x) const { return detail::gelu(x); }
};
struct GeluGradOp {  // op(dy, x)
  __device__ float operator()(float dy, float x) const {
    return detail::mul_rn(dy, detail::gelu_grad(x));
  }
};

// exp(-2u) for the half-precision path: hardware exp2, the argument clamped like portable_exp's
// (so 1 + e stays finite and e * s below never meets inf * 0; NaN becomes 80 and x keeps it).
__device__ STOKER_FORCEINLINE float gelu_fast_exp(float x) {
  const float u = detail::kGeluSqrt2OverPi * fmaf(detail::kGeluCoeff * x * x, x, x);
  return __expf(fminf(-2.0f * u, 80.0f));
}
struct GeluFastOp {  // x * sigmoid(2u)
  __device__ float operator()(float x) const { return __fdividef(x, 1.0f + gelu_fast_exp(x)); }
};
struct GeluFastGradOp {  // op(dy, x): dy * (s + 2 x s (1 - s) u')
  __device__ float operator()(float dy, float x) const {
    const float e = gelu_fast_exp(x);
    const float s = __fdividef(1.0f, 1.0f + e);
    const float du = detail::kGeluSqrt2OverPi * fmaf(detail::kGeluCoeff3, x * x, 1.0f);
    return dy * fmaf(2.0f * x * s * (e * s), du, s);
  }
};

template <typename Op>
void unary(const Tensor& out, const Tensor& in, Op op) {
  const core::DeviceScope scope(out.device().index);
  visit_float(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_map(out.device(), static_cast<T*>(out.data()), static_cast<const T*>(in.data()),
               static_cast<const void*>(nullptr), out.numel(), op);
  });
}

template <typename Op>
void binary(const Tensor& out, const Tensor& a, const Tensor& b, Op op) {
  const core::DeviceScope scope(out.device().index);
  visit_float(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_map(out.device(), static_cast<T*>(out.data()), static_cast<const T*>(a.data()),
               static_cast<const T*>(b.data()), out.numel(), op);
  });
}

// y[i] = keep(i) ? x[i] * scale : 0 over groups of four elements; kVec: both pointers aligned to
// a Pack of four (then only the last group may be partial).
template <bool kVec, typename T>
__global__ void __launch_bounds__(kBlockSize)
    dropout_kernel(T* y, const T* x, int64_t n, float p, float scale, uint64_t seed,
                   uint64_t offset) {
  const int64_t groups = (n + 3) / 4;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups;
       g += stride) {
    const detail::KeepMask4 m = detail::dropout_keep4(seed, offset, static_cast<uint64_t>(g), p);
    const int64_t i0 = 4 * g;
    if (kVec && i0 + 4 <= n) {
      const Pack<T, 4> v = load_pack<4>(x + i0);
      Pack<T, 4> r;
#pragma unroll
      for (int k = 0; k < 4; ++k)
        r.v[k] = from_float<T>(m.keep[k] ? detail::mul_rn(to_float(v.v[k]), scale) : 0.0f);
      store_pack<4>(y + i0, r);
    } else {
      for (int k = 0; k < 4 && i0 + k < n; ++k)
        y[i0 + k] = from_float<T>(m.keep[k] ? detail::mul_rn(to_float(x[i0 + k]), scale) : 0.0f);
    }
  }
}

void dropout(const Tensor& out, const Tensor& in, float p, uint64_t seed, uint64_t offset) {
  const core::DeviceScope scope(out.device().index);
  const float scale = detail::dropout_scale(p);
  visit_float(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* y = static_cast<T*>(out.data());
    const T* x = static_cast<const T*>(in.data());
    const int64_t n = out.numel();
    const unsigned grid = grid_for((n + 3) / 4, out.device().index);
    const cudaStream_t stream = core::cuda_stream(out.device());
    constexpr size_t kAlign = pack_align<T, 4>();
    const bool vec = reinterpret_cast<uintptr_t>(y) % kAlign == 0 &&
                     reinterpret_cast<uintptr_t>(x) % kAlign == 0;
    if (vec) {
      dropout_kernel<true><<<grid, kBlockSize, 0, stream>>>(y, x, n, p, scale, seed, offset);
    } else {
      dropout_kernel<false><<<grid, kBlockSize, 0, stream>>>(y, x, n, p, scale, seed, offset);
    }
    STOKER_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace

void relu_forward(const Tensor& y, const Tensor& x) { unary(y, x, ReluOp{}); }

void relu_backward(const Tensor& dx, const Tensor& dy, const Tensor& y) {
  binary(dx, dy, y, ReluGradOp{});
}

void gelu_forward(const Tensor& y, const Tensor& x) {
  if (y.dtype() == DType::f32) {
    unary(y, x, GeluOp{});
  } else {
    unary(y, x, GeluFastOp{});
  }
}

void gelu_backward(const Tensor& dx, const Tensor& dy, const Tensor& x) {
  if (dx.dtype() == DType::f32) {
    binary(dx, dy, x, GeluGradOp{});
  } else {
    binary(dx, dy, x, GeluFastGradOp{});
  }
}

void dropout_forward(const Tensor& y, const Tensor& x, float p, uint64_t seed, uint64_t offset) {
  dropout(y, x, p, seed, offset);
}

void dropout_backward(const Tensor& dx, const Tensor& dy, float p, uint64_t seed, uint64_t offset) {
  dropout(dx, dy, p, seed, offset);
}

STOKER_REGISTER_STUB(relu_forward, relu_forward);
STOKER_REGISTER_STUB(relu_backward, relu_backward);
STOKER_REGISTER_STUB(gelu_forward, gelu_forward);
STOKER_REGISTER_STUB(gelu_backward, gelu_backward);
STOKER_REGISTER_STUB(dropout_forward, dropout_forward);
STOKER_REGISTER_STUB(dropout_backward, dropout_backward);

}  // namespace stoker::ops::cuda
