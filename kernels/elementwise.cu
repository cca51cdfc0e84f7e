// CUDA add, mul, axpy, scale: one pass over memory, 16-byte vector accesses where aligned.
//
// Bit-equality with the CPU reference (src/ops/cpu/elementwise.cpp) is the invariant: every
// element is widened to fp32 exactly, computed with ONE fp32 expression and rounded once (RNE,
// core/half.h) to the output dtype. The expressions are written so nvcc cannot contract them
// differently from the CPU: add = a + b, mul = a * b, scale = x * alpha (no add to fuse into),
// and axpy = fmaf(alpha, x, y) spelled out as an fma on both backends.
#include "kernel_util.cuh"
#include "ops/elementwise_stubs.h"

namespace stoker::ops::cuda {

namespace {

struct AddOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct MulOp {
  __device__ float operator()(float a, float b) const { return a * b; }
};
// Applied as op(y, x): the output y is also the first input.
struct AxpyOp {
  float alpha;
  __device__ float operator()(float y, float x) const { return fmaf(alpha, x, y); }
};
struct ScaleOp {
  float alpha;
  __device__ float operator()(float x) const { return x * alpha; }
};

// x * (*factor): the factor is a device scalar (the loss scale), read by every thread.
struct ScaleByOp {
  const float* factor;
  __device__ float operator()(float x) const { return x * *factor; }
};

template <typename Op>
void binary_same_dtype(const Tensor& out, const Tensor& a, const Tensor& b, Op op) {
  const core::DeviceScope scope(out.device().index);
  visit_float(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_map(out.device(), static_cast<T*>(out.data()), static_cast<const T*>(a.data()),
               static_cast<const T*>(b.data()), out.numel(), op);
  });
}

}  // namespace

void add(const Tensor& out, const Tensor& a, const Tensor& b) {
  binary_same_dtype(out, a, b, AddOp{});
}

void mul(const Tensor& out, const Tensor& a, const Tensor& b) {
  binary_same_dtype(out, a, b, MulOp{});
}

void axpy(const Tensor& y, float alpha, const Tensor& x) {
  const core::DeviceScope scope(y.device().index);
  visit_float(y.dtype(), [&](auto ytag) {
    using Y = typename decltype(ytag)::type;
    visit_float(x.dtype(), [&](auto xtag) {
      using X = typename decltype(xtag)::type;
      Y* py = static_cast<Y*>(y.data());
      launch_map(y.device(), py, static_cast<const Y*>(py), static_cast<const X*>(x.data()),
                 y.numel(), AxpyOp{alpha});
    });
  });
}

void scale(const Tensor& x, float alpha) {
  const core::DeviceScope scope(x.device().index);
  visit_float(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(x.data());
    launch_map(x.device(), p, static_cast<const T*>(p), static_cast<const void*>(nullptr),
               x.numel(), ScaleOp{alpha});
  });
}

void scale_by(const Tensor& x, const Tensor& factor) {
  const core::DeviceScope scope(x.device().index);
  visit_float(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(x.data());
    launch_map(x.device(), p, static_cast<const T*>(p), static_cast<const void*>(nullptr),
               x.numel(), ScaleByOp{static_cast<const float*>(factor.data())});
  });
}

STOKER_REGISTER_STUB(add, add);
STOKER_REGISTER_STUB(mul, mul);
STOKER_REGISTER_STUB(axpy, axpy);
STOKER_REGISTER_STUB(scale, scale);
STOKER_REGISTER_STUB(scale_by, scale_by);

}  // namespace stoker::ops::cuda
