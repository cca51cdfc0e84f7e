// ops::gemm's gelu and dgelu epilogues on the GPU (cuBLASLt's GELU_AUX(_BIAS) and DGELU, or the
// unfused fallback where N is not a multiple of 8 or the aux pointer is misaligned) against the
// CPU reference (the unfused composition) and against the unfused CUDA ops, within the rounding
// of the output dtype: the fused GELU is computed from the fp32 accumulator before rounding, the
// unfused one from the rounded pre-activation. The same for the bias gradient beside a weight
// gradient (BGRADB, or bias_grad after the GEMM), within fp32 summation order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "stoker/ops/activation.h"
#include "stoker/ops/elementwise.h"
#include "stoker/ops/gemm.h"
#include "test_util.h"

namespace stoker::ops {
namespace {

using test::gpu;

double eps_of(DType d) {
  switch (d) {
    case DType::f16:
      return std::ldexp(1.0, -10);
    case DType::bf16:
      return std::ldexp(1.0, -7);
    default:
      // fp32: accumulation order, and cuBLASLt's GELU — the tanh form, but with its own tanh:
      // measured on an H100 (CUDA 13.0) 3.9e-6 from ops::gelu_forward's at most, and its
      // derivative 1.5e-5 from gelu_backward's (the one-time check in gemm_cublaslt.cpp).
      return 1e-5;
  }
}

// |got - want| <= 3 eps (1 + |want|) element by element.
::testing::AssertionResult close(const Tensor& got, const Tensor& want, DType dtype) {
  const std::vector<float> g = got.to(Device::cpu()).to_floats();
  const std::vector<float> w = want.to(Device::cpu()).to_floats();
  if (g.size() != w.size()) return ::testing::AssertionFailure() << "sizes differ";
  const double eps = eps_of(dtype);
  for (size_t i = 0; i < g.size(); ++i) {
    const double tol = 3.0 * eps * (1.0 + std::fabs(w[i]));
    if (!(std::fabs(g[i] - w[i]) <= tol))
      return ::testing::AssertionFailure()
             << "element " << i << ": " << g[i] << " vs " << w[i] << " (tolerance " << tol << ")";
  }
  return ::testing::AssertionSuccess();
}

// dgelu: C = product * gelu'(aux). cuBLASLt's derivative is the tanh form's to 1.5e-5 (the
// one-time check in gemm_cublaslt.cpp, measured on an H100), an error the product then scales:
// |got - want| <= 3 eps (1 + |want|) + 2e-5 |product|.
::testing::AssertionResult close_dgelu(const Tensor& got, const Tensor& want, const Tensor& product,
                                       DType dtype) {
  const std::vector<float> g = got.to(Device::cpu()).to_floats();
  const std::vector<float> w = want.to(Device::cpu()).to_floats();
  const std::vector<float> p = product.to(Device::cpu()).to_floats();
  const double eps = eps_of(dtype);
  for (size_t i = 0; i < g.size(); ++i) {
    const double tol = 3.0 * eps * (1.0 + std::fabs(w[i])) + 2e-5 * std::fabs(p[i]);
    if (!(std::fabs(g[i] - w[i]) <= tol))
      return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << " vs " << w[i]
                                           << " (product " << p[i] << ", tolerance " << tol << ")";
  }
  return ::testing::AssertionSuccess();
}

struct Case {
  int64_t m, n, k;
  bool ta, tb;
  DType in, out;
  bool bias;
  int64_t aux_offset = 0;  // elements: a misaligned aux pointer
};

std::string describe(const Case& c) {
  return "m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
         (c.ta ? " A^T" : " A") + (c.tb ? " B^T" : " B") + " " + std::string(dtype_name(c.in)) +
         "->" + std::string(dtype_name(c.out)) + (c.bias ? " bias" : "") + " aux offset " +
         std::to_string(c.aux_offset);
}

std::vector<Case> cases() {
  std::vector<Case> out;
  const DType pairs[][2] = {
      {DType::f32, DType::f32}, {DType::bf16, DType::bf16}, {DType::f16, DType::f16}};
  for (const auto& p : pairs)
    for (const bool ta : {false, true})
      for (const bool tb : {false, true})
        for (const bool bias : {false, true}) {
          out.push_back({64, 256, 96, ta, tb, p[0], p[1], bias});  // N % 8 == 0: fused
          out.push_back({33, 20, 17, ta, tb, p[0], p[1], bias});   // N % 8 != 0: fallback
        }
  out.push_back({256, 3072, 768, false, true, DType::bf16, DType::bf16, true});  // GPT-2 fc
  out.push_back({64, 256, 96, false, true, DType::bf16, DType::bf16, true, 8});  // 16-byte aux
  return out;
}

struct Inputs {
  Tensor a, b, bias;  // host
};

Inputs inputs(const Case& c, uint32_t seed) {
  return {
      test::random_tensor(c.ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, c.in, seed, -1.0f, 1.0f),
      test::random_tensor(c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n}, c.in, seed + 1, -1.0f, 1.0f),
      test::random_tensor({c.n}, c.out, seed + 2, -1.0f, 1.0f)};
}

TEST(GemmEpilogueGpu, GeluMatchesTheCpuReferenceAndTheUnfusedCudaOps) {
  STOKER_REQUIRE_GPU();
  set_allow_tf32(false);
  uint32_t seed = 1;
  for (const Case& c : cases()) {
    SCOPED_TRACE(describe(c));
    const Inputs in = inputs(c, seed);
    seed += 3;
    // CPU reference (the unfused composition, bit for bit).
    const Tensor pre_cpu = Tensor::empty({c.m, c.n}, c.out);
    const Tensor y_cpu = Tensor::empty({c.m, c.n}, c.out);
    gemm(y_cpu, in.a, in.b,
         {.trans_a = c.ta,
          .trans_b = c.tb,
          .bias = c.bias ? &in.bias : nullptr,
          .epilogue = GemmEpilogue::gelu,
          .aux = &pre_cpu});
    // GPU, fused.
    const Tensor a = in.a.to(gpu()), b = in.b.to(gpu()), bias = in.bias.to(gpu());
    const Tensor pre =
        test::empty_at_offset(c.m * c.n, c.out, gpu(), c.aux_offset).reshape({c.m, c.n});
    test::poison(pre);
    const Tensor y = test::poisoned({c.m, c.n}, c.out, gpu());
    const GemmOptions fused{.trans_a = c.ta,
                            .trans_b = c.tb,
                            .bias = c.bias ? &bias : nullptr,
                            .epilogue = GemmEpilogue::gelu,
                            .aux = &pre};
    gemm(y, a, b, fused);
    EXPECT_TRUE(close(pre, pre_cpu, c.out)) << "aux vs CPU";
    EXPECT_TRUE(close(y, y_cpu, c.out)) << "c vs CPU";
    // GPU, unfused ops.
    const Tensor pre_u = Tensor::empty({c.m, c.n}, c.out, gpu());
    const Tensor y_u = Tensor::empty({c.m, c.n}, c.out, gpu());
    gemm(pre_u, a, b, {.trans_a = c.ta, .trans_b = c.tb, .bias = c.bias ? &bias : nullptr});
    gelu_forward(y_u, pre_u);
    EXPECT_TRUE(close(pre, pre_u, c.out)) << "aux vs the unfused GPU gemm";
    EXPECT_TRUE(close(y, y_u, c.out)) << "c vs the unfused GPU gemm + gelu_forward";
    // A second call (the cached plan) gives the same bits.
    const Tensor y2 = Tensor::empty({c.m, c.n}, c.out, gpu());
    gemm(y2, a, b, fused);
    EXPECT_TRUE(test::bit_identical(y2, y)) << "second call";
  }
}

TEST(GemmEpilogueGpu, DgeluMatchesTheCpuReferenceAndTheUnfusedCudaOps) {
  STOKER_REQUIRE_GPU();
  set_allow_tf32(false);
  uint32_t seed = 500;
  for (const Case& c : cases()) {
    if (c.bias) continue;
    SCOPED_TRACE(describe(c));
    const Inputs in = inputs(c, seed);
    const Tensor pre_host = test::random_tensor({c.m, c.n}, c.out, seed + 3, -4.0f, 4.0f);
    seed += 4;
    const Tensor d_cpu = Tensor::empty({c.m, c.n}, c.out);
    gemm(d_cpu, in.a, in.b,
         {.trans_a = c.ta, .trans_b = c.tb, .epilogue = GemmEpilogue::dgelu, .aux = &pre_host});
    const Tensor a = in.a.to(gpu()), b = in.b.to(gpu());
    const Tensor pre = test::copy_at_offset(pre_host, gpu(), c.aux_offset);
    const Tensor d = test::poisoned({c.m, c.n}, c.out, gpu());
    gemm(d, a, b, {.trans_a = c.ta, .trans_b = c.tb, .epilogue = GemmEpilogue::dgelu, .aux = &pre});
    const Tensor product = Tensor::empty({c.m, c.n}, c.out, gpu());
    gemm(product, a, b, {.trans_a = c.ta, .trans_b = c.tb});
    EXPECT_TRUE(close_dgelu(d, d_cpu, product, c.out)) << "vs CPU";
    const Tensor g_u = Tensor::empty({c.m, c.n}, c.out, gpu());
    gelu_backward(g_u, product, pre);
    EXPECT_TRUE(close_dgelu(d, g_u, product, c.out)) << "vs the unfused GPU gemm + gelu_backward";
    EXPECT_TRUE(test::bit_identical(pre, test::copy_at_offset(pre_host, gpu(), 0)))
        << "aux is only read";
  }
}

// fp32 sums in another order: |got - want| <= 1e-5 * scale + 1e-6 element by element, scale the
// sum of the terms' magnitudes.
::testing::AssertionResult close_sums(const Tensor& got, const Tensor& want, const Tensor& scale) {
  const std::vector<float> g = got.to(Device::cpu()).to_floats();
  const std::vector<float> w = want.to(Device::cpu()).to_floats();
  const std::vector<float> s = scale.to(Device::cpu()).to_floats();
  if (g.size() != w.size() || g.size() != s.size())
    return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < g.size(); ++i) {
    const double tol = 1e-5 * s[i] + 1e-6;
    if (!(std::fabs(g[i] - w[i]) <= tol))
      return ::testing::AssertionFailure()
             << "element " << i << ": " << g[i] << " vs " << w[i] << " (tolerance " << tol << ")";
  }
  return ::testing::AssertionSuccess();
}

Tensor abs_of(const Tensor& host) {
  const Tensor out = Tensor::empty(host.shape(), DType::f32);
  cast(out, host);
  float* p = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) p[i] = std::fabs(p[i]);
  return out;
}

TEST(GemmEpilogueGpu, BiasGradMatchesTheCpuReferenceAndTheUnfusedCudaOp) {
  STOKER_REQUIRE_GPU();
  set_allow_tf32(false);
  struct BiasGradCase {
    int64_t m, n, k;  // dW [m, n] (+)= dy^T x, dy [k, m], x [k, n]
    DType in, out;
    float beta;
    int64_t offset;  // elements: a bias gradient 4 bytes past an aligned address
  };
  const BiasGradCase bias_grad_cases[] = {
      {3072, 768, 4096, DType::bf16, DType::f32, 0.0f, 0},  // GPT-2's fc, B*T = 4096
      {768, 3072, 4096, DType::bf16, DType::f32, 1.0f, 0},  // its proj, accumulating dW
      {2304, 768, 1024, DType::f16, DType::f32, 0.0f, 0},
      {256, 64, 512, DType::f32, DType::f32, 0.0f, 0},
      {256, 64, 512, DType::bf16, DType::bf16, 0.0f, 0},  // a half C: bias_grad after the GEMM
      {96, 40, 300, DType::bf16, DType::f32, 0.0f, 1},
      {33, 20, 17, DType::bf16, DType::f32, 0.0f, 0}};
  uint32_t seed = 900;
  for (const BiasGradCase& c : bias_grad_cases) {
    SCOPED_TRACE("m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) +
                 " k=" + std::to_string(c.k) + " " + std::string(dtype_name(c.in)) + "->" +
                 std::string(dtype_name(c.out)) + " beta=" + std::to_string(c.beta) +
                 " offset=" + std::to_string(c.offset));
    const Tensor dy_host = test::random_tensor({c.k, c.m}, c.in, seed++);
    const Tensor x_host = test::random_tensor({c.k, c.n}, c.in, seed++);
    const Tensor c0_host = test::random_tensor({c.m, c.n}, c.out, seed++);
    // References: the CPU's bias_grad, and the magnitudes that bound fp32 reordering.
    const Tensor db_cpu = Tensor::zeros({c.m}, DType::f32);
    bias_grad(db_cpu, dy_host);
    const Tensor db_scale = Tensor::zeros({c.m}, DType::f32);
    bias_grad(db_scale, abs_of(dy_host));
    const Tensor c_scale = Tensor::empty({c.m, c.n}, DType::f32);
    gemm(c_scale, abs_of(dy_host), abs_of(x_host), {.trans_a = true});
    if (c.beta != 0.0f) axpy(c_scale, 1.0f, abs_of(c0_host));

    const Tensor dy = dy_host.to(gpu()), x = x_host.to(gpu());
    const Tensor c_fused = c0_host.to(gpu());
    const Tensor db = test::empty_at_offset(c.m, DType::f32, gpu(), c.offset);
    test::poison(db);
    const GemmOptions plain{.trans_a = true, .beta = c.beta};
    GemmOptions fused = plain;
    fused.bias_grad = &db;
    gemm(c_fused, dy, x, fused);
    // The unfused CUDA ops.
    const Tensor c_plain = c0_host.to(gpu());
    gemm(c_plain, dy, x, plain);
    const Tensor db_plain = Tensor::zeros({c.m}, DType::f32, gpu());
    bias_grad(db_plain, dy);
    EXPECT_TRUE(close_sums(db, db_cpu, db_scale)) << "bias_grad vs CPU";
    EXPECT_TRUE(close_sums(db, db_plain, db_scale)) << "bias_grad vs the CUDA bias_grad";
    if (c.out == DType::f32) {
      EXPECT_TRUE(close_sums(c_fused, c_plain, c_scale)) << "c vs the GEMM without bias_grad";
    } else {
      EXPECT_TRUE(close(c_fused, c_plain, c.out)) << "c vs the GEMM without bias_grad";
    }
    // A second call (the cached plan) gives the same bits, the bias gradient overwritten again.
    const Tensor db_first = db.to(Device::cpu());
    const Tensor c2 = c0_host.to(gpu());
    test::poison(db);
    gemm(c2, dy, x, fused);
    EXPECT_TRUE(test::bit_identical(c2, c_fused)) << "second call: c";
    EXPECT_TRUE(test::bit_identical(db.to(Device::cpu()), db_first)) << "second call: bias_grad";
  }
}

}  // namespace
}  // namespace stoker::ops
