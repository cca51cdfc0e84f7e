// nn::SwiGLU and nn::RMSNorm (Llama's MLP block and norm) on the GPU against the same modules on
// the CPU with the same weights, f32 and bf16 activations: output, input gradient and every
// parameter gradient. The GEMMs (cuBLASLt vs BLAS) and the norms' fp32 vs fp64 statistics round
// differently, so the comparison is per tensor, relative to its largest value: 1e-4 in f32, a
// few bf16 ulps (2^-7 each) in bf16, as the GEMM's output rounding feeds the next op.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "stoker/nn/layernorm.h"
#include "stoker/nn/linear.h"
#include "test_util.h"

namespace stoker::nn {
namespace {

void expect_same_module(Module& cpu, Module& gpu, const Tensor& x, const Tensor& dy, double rtol,
                        const std::string& what) {
  gpu.to(test::gpu());
  const Tensor y = cpu.forward(x), gy = gpu.forward(x.to(test::gpu()));
  const Tensor dx = cpu.backward(dy), gdx = gpu.backward(dy.to(test::gpu()));
  test::expect_max_abs_close(gy.to_floats(), y.to_floats(), rtol, what + " y");
  test::expect_max_abs_close(gdx.to_floats(), dx.to_floats(), rtol, what + " dx");
  const auto pc = cpu.named_parameters(), pg = gpu.named_parameters();
  ASSERT_EQ(pc.size(), pg.size());
  for (size_t i = 0; i < pc.size(); ++i)
    test::expect_max_abs_close(pg[i].second->grad().to_floats(), pc[i].second->grad().to_floats(),
                               rtol, what + " d" + pc[i].first);
}

TEST(LlamaModulesGpuTest, SwiGLUAndRMSNormMatchTheCpu) {
  STOKER_REQUIRE_GPU();
  for (DType d : {DType::f32, DType::bf16}) {
    const double rtol = d == DType::f32 ? 1e-4 : 4.0 / 128;
    const std::string what(dtype_name(d));
    {
      SwiGLU cpu(64, 176), gpu(64, 176);
      gpu.gate_up_proj().weight().set_value(cpu.gate_up_proj().weight().value());
      gpu.down_proj().weight().set_value(cpu.down_proj().weight().value());
      expect_same_module(cpu, gpu, test::random_tensor({2, 24, 64}, d, 1, -2.0f, 2.0f),
                         test::random_tensor({2, 24, 64}, d, 2), rtol, "SwiGLU " + what);
    }
    {
      RMSNorm cpu(2048, 1e-5f), gpu(2048, 1e-5f);
      cpu.weight().set_value(test::random_tensor({2048}, DType::f32, 3, 0.5f, 1.5f));
      gpu.weight().set_value(cpu.weight().value());
      expect_same_module(cpu, gpu, test::random_tensor({4, 2048}, d, 4, -3.0f, 3.0f),
                         test::random_tensor({4, 2048}, d, 5), rtol, "RMSNorm " + what);
    }
  }
}

}  // namespace
}  // namespace stoker::nn
