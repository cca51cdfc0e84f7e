// FP8 on the GPU against the CPU reference: fp8_cast_transpose gives the CPU's codes (both
// layouts), scale_inv and amax bit for bit on aligned and ragged shapes; gemm_fp8 matches the
// reference (dequantized f32 GEMM) within fp32-accumulation rounding for every format pair,
// output dtype, bias, GELU epilogue and accumulation — through cuBLASLt's FP8 kernels where the
// shape allows (one "gemm_fp8" op, seen by an OpListener) and the reference composition where
// it does not; and an FP8 Linear on the GPU matches the same Linear on the CPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "stoker/core/op_listener.h"
#include "stoker/nn/linear.h"
#include "stoker/ops/elementwise.h"
#include "stoker/ops/fp8.h"
#include "test_util.h"

namespace stoker::ops {
namespace {

using test::gpu;

TEST(GemmFp8GpuTest, CastTransposeEqualsTheCpus) {
  STOKER_REQUIRE_GPU();
  for (const auto& [r, c] :
       {std::pair<int64_t, int64_t>{1, 1}, {37, 70}, {64, 64}, {130, 200}, {1000, 3}, {256, 768}}) {
    for (const DType dt : {DType::f32, DType::bf16, DType::f16}) {
      for (const Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
        SCOPED_TRACE(testing::Message() << r << "x" << c << " " << dtype_name(dt) << " "
                                        << (f == Fp8Format::e4m3 ? "e4m3" : "e5m2"));
        const Tensor x = test::random_tensor({r, c}, dt, static_cast<uint32_t>(r + c), -9.0f, 7.0f);
        const Tensor scale = Tensor::from_floats({41.0f}, {});
        Tensor q = Tensor::empty({r, c}, DType::u8), qt = Tensor::empty({c, r}, DType::u8);
        Tensor si = Tensor::empty({}, DType::f32), am = Tensor::empty({}, DType::f32);
        fp8_cast_transpose({&q, &qt, &si, &am}, x, scale, f);
        const Tensor dx = x.to(gpu());
        Tensor dq = Tensor::empty({r, c}, DType::u8, gpu()),
               dqt = Tensor::empty({c, r}, DType::u8, gpu());
        Tensor dsi = Tensor::empty({}, DType::f32, gpu()),
               dam = Tensor::empty({}, DType::f32, gpu());
        fp8_cast_transpose({&dq, &dqt, &dsi, &dam}, dx, scale.to(gpu()), f);
        ASSERT_EQ(dq.to(Device::cpu()).to_vector<uint8_t>(), q.to_vector<uint8_t>());
        ASSERT_EQ(dqt.to(Device::cpu()).to_vector<uint8_t>(), qt.to_vector<uint8_t>());
        EXPECT_EQ(dsi.item(), si.item());
        EXPECT_EQ(dam.item(), am.item());
        // Only the transposed codes (the backward's operand), and amax again from zero.
        Tensor only_t = Tensor::empty({c, r}, DType::u8, gpu());
        fp8_cast_transpose({.codes_t = &only_t, .scale_inv = &dsi, .amax = &dam}, dx,
                           scale.to(gpu()), f);
        ASSERT_EQ(only_t.to(Device::cpu()).to_vector<uint8_t>(), qt.to_vector<uint8_t>());
        EXPECT_EQ(dam.item(), am.item());
      }
    }
  }
  Tensor nan_x = Tensor::from_floats({1.0f, NAN, -3.0f, 2.0f}, {2, 2}).to(gpu());
  Tensor si = Tensor::empty({}, DType::f32, gpu()), am = Tensor::empty({}, DType::f32, gpu());
  fp8_cast_transpose({.scale_inv = &si, .amax = &am}, nan_x,
                     Tensor::from_floats({1.0f}, {}).to(gpu()), Fp8Format::e4m3);
  EXPECT_TRUE(std::isnan(am.item()));
}

// Records the names of the outermost ops a call launches.
struct OpNames : core::OpListener {
  std::vector<std::string> names;
  int depth = 0;
  void op_begin(const char* name, Device, const core::OpCost&) override {
    if (depth++ == 0) names.emplace_back(name);
  }
  void op_end() override { --depth; }
};

// x [rows, cols] random in [-lo, hi], quantized at fp8_max / amax: an operand as training makes it.
Fp8Tensor operand(int64_t rows, int64_t cols, uint32_t seed, Fp8Format f, Device d) {
  const Tensor x = test::random_tensor({rows, cols}, DType::f32, seed, -2.0f, 2.0f).to(d);
  const float amax = max_abs(x).item();
  const Tensor scale = Tensor::from_floats({core::fp8_max(f) / amax}, {}).to(d);
  Fp8Tensor t{Tensor::empty({rows, cols}, DType::u8, d), Tensor::empty({}, DType::f32, d), f};
  fp8_cast_transpose({.codes = &t.codes, .scale_inv = &t.scale_inv}, x, scale, f);
  return t;
}

Fp8Tensor on_cpu(const Fp8Tensor& t) {
  return {t.codes.to(Device::cpu()), t.scale_inv.to(Device::cpu()), t.format};
}

TEST(GemmFp8GpuTest, MatchesTheReferenceThroughCublasLtWhereTheShapeAllows) {
  STOKER_REQUIRE_GPU();
  if (!fp8_gemm_supported(gpu())) GTEST_SKIP() << "no FP8 tensor cores on this GPU";
  struct Case {
    int64_t m, n, k;
    bool fast;  // cuBLASLt's FP8 kernels expected (every dimension a multiple of 16)
  };
  for (const Case cs :
       {Case{64, 128, 256, true}, Case{512, 768, 3072, true}, Case{33, 40, 24, false}}) {
    for (const auto& [fa, fb] :
         {std::pair{Fp8Format::e4m3, Fp8Format::e4m3}, std::pair{Fp8Format::e5m2, Fp8Format::e4m3},
          std::pair{Fp8Format::e4m3, Fp8Format::e5m2}}) {
      const Fp8Tensor a = operand(cs.m, cs.k, 1, fa, gpu()), b = operand(cs.n, cs.k, 2, fb, gpu());
      const Fp8Tensor ca = on_cpu(a), cb = on_cpu(b);
      const Tensor bias = test::random_tensor({cs.n}, DType::bf16, 3);
      for (const DType dt : {DType::f32, DType::bf16}) {
        SCOPED_TRACE(testing::Message()
                     << cs.m << "x" << cs.n << "x" << cs.k << " " << dtype_name(dt) << " a "
                     << static_cast<int>(fa) << " b " << static_cast<int>(fb));
        const double rtol = dt == DType::f32 ? 2e-3 : 1e-2;
        // Plain, with the bias (in C's dtype, as a Linear passes it).
        const Tensor bias_c = bias.to(Device::cpu());
        Tensor want = Tensor::empty({cs.m, cs.n}, dt);
        const Tensor bias_dt = Tensor::from_floats(bias_c.to_floats(), {cs.n}, dt);
        gemm_fp8(want, ca, cb, {.trans_b = true, .bias = &bias_dt});
        Tensor got = Tensor::empty({cs.m, cs.n}, dt, gpu());
        const Tensor bias_g = bias_dt.to(gpu());
        OpNames ops;
        core::OpListener* prev = core::set_op_listener(&ops);
        gemm_fp8(got, a, b, {.trans_b = true, .bias = &bias_g});
        core::set_op_listener(prev);
        test::expect_max_abs_close(got.to(Device::cpu()).to_floats(), want.to_floats(), rtol, "C");
        if (cs.fast) {
          EXPECT_EQ(ops.names, std::vector<std::string>{"gemm_fp8"});
        } else {
          EXPECT_NE(ops.names, std::vector<std::string>{"gemm_fp8"});
        }
        // GELU epilogue: the pre-activation and the activation.
        Tensor want_aux = Tensor::empty({cs.m, cs.n}, dt),
               got_aux = Tensor::empty({cs.m, cs.n}, dt, gpu());
        gemm_fp8(
            want, ca, cb,
            {.trans_b = true, .bias = &bias_dt, .epilogue = GemmEpilogue::gelu, .aux = &want_aux});
        gemm_fp8(
            got, a, b,
            {.trans_b = true, .bias = &bias_g, .epilogue = GemmEpilogue::gelu, .aux = &got_aux});
        test::expect_max_abs_close(got_aux.to(Device::cpu()).to_floats(), want_aux.to_floats(),
                                   rtol, "gelu aux");
        test::expect_max_abs_close(got.to(Device::cpu()).to_floats(), want.to_floats(), rtol,
                                   "gelu C");
        // dgelu, reading the aux just written.
        gemm_fp8(want, ca, cb,
                 {.trans_b = true, .epilogue = GemmEpilogue::dgelu, .aux = &want_aux});
        const Tensor aux_g = want_aux.to(gpu());
        gemm_fp8(got, a, b, {.trans_b = true, .epilogue = GemmEpilogue::dgelu, .aux = &aux_g});
        test::expect_max_abs_close(got.to(Device::cpu()).to_floats(), want.to_floats(), rtol,
                                   "dgelu C");
      }
      // beta = 1 into an f32 C: a weight gradient accumulating.
      Tensor want = Tensor::from_floats(std::vector<float>(cs.m * cs.n, 0.75f), {cs.m, cs.n});
      Tensor got = want.to(gpu());
      gemm_fp8(want, ca, cb, {.trans_b = true, .beta = 1.0f});
      gemm_fp8(got, a, b, {.trans_b = true, .beta = 1.0f});
      test::expect_max_abs_close(got.to(Device::cpu()).to_floats(), want.to_floats(), 2e-3,
                                 "accumulated C");
    }
  }
}

TEST(GemmFp8GpuTest, Fp8LinearMatchesTheCpus) {
  STOKER_REQUIRE_GPU();
  if (!fp8_gemm_supported(gpu())) GTEST_SKIP() << "no FP8 tensor cores on this GPU";
  nn::manual_seed(4);
  nn::Linear cpu(256, 384), dev(256, 384);
  dev.weight().set_value(cpu.weight().value());
  dev.bias().set_value(cpu.bias().value());
  dev.to(gpu());
  cpu.set_fp8(true);
  dev.set_fp8(true);
  for (int step = 0; step < 3; ++step) {  // later steps run on the delayed scales
    const Tensor x = test::random_tensor({128, 256}, DType::bf16, 10 + step, -3.0f, 3.0f);
    const Tensor dy = test::random_tensor({128, 384}, DType::bf16, 20 + step, -0.01f, 0.01f);
    const Tensor y = cpu.forward(x), yd = dev.forward(x.to(gpu()));
    test::expect_max_abs_close(yd.to(Device::cpu()).to_floats(), y.to_floats(), 1e-2, "y");
    const Tensor dx = cpu.backward(dy), dxd = dev.backward(dy.to(gpu()));
    test::expect_max_abs_close(dxd.to(Device::cpu()).to_floats(), dx.to_floats(), 1e-2, "dx");
  }
  test::expect_max_abs_close(dev.weight().grad().to(Device::cpu()).to_floats(),
                             cpu.weight().grad().to_floats(), 2e-3, "dW");
}

}  // namespace
}  // namespace stoker::ops
