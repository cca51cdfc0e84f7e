// Shared by the batch-norm tests (plain and with the fused ReLU, CPU and GPU): the inputs of one
// training forward + backward, and the GPU-against-CPU comparison of its outputs.
#pragma once

#include <gtest/gtest.h>

#include <fmt/format.h>
#include <cmath>
#include <string>
#include <vector>

#include "ops/conv_test_util.h"
#include "stoker/ops/activation.h"
#include "stoker/ops/batchnorm.h"
#include "stoker/ops/elementwise.h"
#include "stoker/ops/layout.h"
#include "test_util.h"

namespace stoker::test {

struct BnInputs {
  Tensor x, gamma, beta, rm, rv, dy, dgamma, dbeta;
};

// x in [-2, 3] and beta in [-1, 1] (so roughly a third to a half of bn(x) is negative: a fused
// ReLU zeroes a good share of y), gamma in [0.5, 1.5], running variance in [0.5, 2].
inline BnInputs make_bn_inputs(const Dims4& d, ops::Layout l, DType dtype, uint32_t seed) {
  return {random_tensor(ops::shape4(d, l), dtype, seed, -2.0f, 3.0f),
          random_tensor({d.c}, DType::f32, seed + 1, 0.5f, 1.5f),
          random_tensor({d.c}, DType::f32, seed + 2),
          random_tensor({d.c}, DType::f32, seed + 3),
          random_tensor({d.c}, DType::f32, seed + 4, 0.5f, 2.0f),
          random_tensor(ops::shape4(d, l), dtype, seed + 5),
          random_tensor({d.c}, DType::f32, seed + 6),
          random_tensor({d.c}, DType::f32, seed + 7)};
}

// Per-channel sums of x and x^2 in f64, stored as f32 (what the convolution's epilogue hands
// over).
inline void channel_sums(const Tensor& x, ops::Layout l, Tensor& sum, Tensor& sum_sq) {
  const Dims4 d = ops::dims4(x.shape(), l);
  const std::vector<float> v = x.to_floats();
  std::vector<double> s(static_cast<size_t>(d.c)), q(static_cast<size_t>(d.c));
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t c = 0; c < d.c; ++c)
      for (int64_t h = 0; h < d.h; ++h)
        for (int64_t w = 0; w < d.w; ++w) {
          const int64_t i = l == ops::Layout::nchw ? ((n * d.c + c) * d.h + h) * d.w + w
                                                   : ((n * d.h + h) * d.w + w) * d.c + c;
          const double e = v[static_cast<size_t>(i)];
          s[static_cast<size_t>(c)] += e;
          q[static_cast<size_t>(c)] += e * e;
        }
  std::vector<float> fs(s.begin(), s.end()), fq(q.begin(), q.end());
  sum = Tensor::from_floats(fs, {d.c});
  sum_sq = Tensor::from_floats(fq, {d.c});
}

// "nhwc N4 C8 H5 W5 bf16 offset 1": a case in messages.
inline std::string describe_bn_case(ops::Layout l, const Dims4& d, DType dtype, int64_t offset) {
  return fmt::format("{} N{} C{} H{} W{} {} offset {}", ops::layout_name(l), d.n, d.c, d.h, d.w,
                     dtype_name(dtype), offset);
}

// What one training forward + backward produced.
struct BnOutputs {
  Tensor y, mean, invstd, rm, rv, dx, dgamma, dbeta;
};

// The GPU's outputs `g` against the CPU's `c` for activations of `dtype` over m = N*H*W values
// per channel: tolerances of the dtype's rounding (dx four times looser in half precision: it
// sums three rounded terms; dgamma / dbeta absolute bounds grow as sqrt(m)).
inline void expect_bn_outputs_close(const BnOutputs& g, const BnOutputs& c, DType dtype, double m,
                                    const std::string& what) {
  const double r = dtype == DType::f32 ? 1e-4 : (dtype == DType::f16 ? 4e-3 : 2e-2);
  const double rdx = dtype == DType::f32 ? r : 4 * r;
  EXPECT_TRUE(all_close(g.y, c.y, r, r)) << what << ": y";
  EXPECT_TRUE(all_close(g.mean, c.mean, 1e-5, 1e-5)) << what << ": save_mean";
  EXPECT_TRUE(all_close(g.invstd, c.invstd, 1e-4, 1e-5)) << what << ": save_invstd";
  EXPECT_TRUE(all_close(g.rm, c.rm, 1e-5, 1e-5)) << what << ": running_mean";
  EXPECT_TRUE(all_close(g.rv, c.rv, 1e-4, 1e-5)) << what << ": running_var";
  EXPECT_TRUE(all_close(g.dx, c.dx, rdx, rdx)) << what << ": dx";
  EXPECT_TRUE(all_close(g.dgamma, c.dgamma, r, r * std::sqrt(m))) << what << ": dgamma";
  EXPECT_TRUE(all_close(g.dbeta, c.dbeta, r, r * std::sqrt(m))) << what << ": dbeta";
}

// One training forward, evaluation forward (with the updated running statistics) and backward
// of batch norm with an optional fused ReLU and residual (ops/batchnorm.h), either fused (one op
// each) or composed from the plain batch norm, add(sum, residual, bn) (nn::Residual's add:
// shortcut + body) and the ReLU ops: the composition the fused ops are defined as. dr is the
// residual's gradient (undefined without a residual).
struct BnRun {
  Tensor y, mean, invstd, rm, rv, y_eval, dx, dgamma, dbeta, dr;
};

inline BnRun run_batchnorm(const BnInputs& in, const Tensor& residual, const Dims4& d,
                           ops::Layout l, bool relu, bool fused) {
  const ops::BatchNormParams plain{.eps = 1e-5f, .momentum = 0.1f, .layout = l};
  ops::BatchNormParams p = plain;
  p.relu = relu;
  const Shape shape = ops::shape4(d, l);
  const DType dt = in.x.dtype();
  const bool has_residual = residual.defined();
  BnRun r{poisoned(shape, dt),
          poisoned({d.c}, DType::f32),
          poisoned({d.c}, DType::f32),
          in.rm.clone(),
          in.rv.clone(),
          poisoned(shape, dt),
          poisoned(shape, dt),
          in.dgamma.clone(),
          in.dbeta.clone(),
          has_residual ? poisoned(shape, dt) : Tensor()};
  if (fused) {
    ops::batchnorm_forward_train(r.y, {r.mean, r.invstd}, {r.rm, r.rv},
                                 {in.x, in.gamma, in.beta, residual}, p);
    ops::batchnorm_forward_eval(r.y_eval, {in.x, in.gamma, in.beta, residual}, {r.rm, r.rv}, p);
    ops::batchnorm_backward({r.dx, r.dgamma, r.dbeta, r.dr}, in.dy, {in.x, in.gamma},
                            {r.mean, r.invstd}, p, relu ? r.y : Tensor());
    return r;
  }
  const auto tail = [&](const Tensor& out, const Tensor& z) {
    Tensor sum = z;
    if (has_residual) {
      sum = poisoned(shape, dt);
      ops::add(sum, residual, z);
    }
    if (relu) {
      ops::relu_forward(out, sum);
    } else {
      ops::copy(out, sum);
    }
  };
  const Tensor z = poisoned(shape, dt);
  ops::batchnorm_forward_train(z, {r.mean, r.invstd}, {r.rm, r.rv}, {in.x, in.gamma, in.beta},
                               plain);
  tail(r.y, z);
  const Tensor ze = poisoned(shape, dt);
  ops::batchnorm_forward_eval(ze, {in.x, in.gamma, in.beta}, {r.rm, r.rv}, plain);
  tail(r.y_eval, ze);
  const Tensor dz = has_residual ? r.dr : poisoned(shape, dt);
  if (relu) {
    ops::relu_backward(dz, in.dy, r.y);
  } else {
    ops::copy(dz, in.dy);
  }
  ops::batchnorm_backward({r.dx, r.dgamma, r.dbeta}, dz, {in.x, in.gamma}, {r.mean, r.invstd},
                          plain);
  return r;
}

// Every output of two runs bit for bit (dr too when either has one).
inline void expect_bn_runs_identical(const BnRun& f, const BnRun& u, const std::string& what) {
  EXPECT_TRUE(bit_identical(f.y, u.y)) << what << ": y";
  EXPECT_TRUE(bit_identical(f.mean, u.mean)) << what << ": save_mean";
  EXPECT_TRUE(bit_identical(f.invstd, u.invstd)) << what << ": save_invstd";
  EXPECT_TRUE(bit_identical(f.rm, u.rm)) << what << ": running_mean";
  EXPECT_TRUE(bit_identical(f.rv, u.rv)) << what << ": running_var";
  EXPECT_TRUE(bit_identical(f.y_eval, u.y_eval)) << what << ": eval y";
  EXPECT_TRUE(bit_identical(f.dx, u.dx)) << what << ": dx";
  EXPECT_TRUE(bit_identical(f.dgamma, u.dgamma)) << what << ": dgamma";
  EXPECT_TRUE(bit_identical(f.dbeta, u.dbeta)) << what << ": dbeta";
  if (f.dr.defined() || u.dr.defined())
    EXPECT_TRUE(bit_identical(f.dr, u.dr)) << what << ": dresidual";
}

}  // namespace stoker::test
