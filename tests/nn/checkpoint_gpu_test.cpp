// Activation checkpointing and selective recomputation on the GPU (nn/checkpoint.h): gradients,
// outputs, input gradients and generator positions bit-identical with and without
// checkpointing, with dropout on, in fp32 and bf16, with gradient accumulation; and the peak
// of the device's memory counters equal to the bytes predicted for an N-block stack (the same
// derivation as tests/nn/checkpoint_test.cpp's PeakMemoryFallsAsPredicted).
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "stoker/core/allocator.h"
#include "stoker/core/stream.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/layernorm.h"
#include "stoker/nn/linear.h"
#include "test_util.h"

namespace stoker::nn {
namespace {

const Device kGpu = Device::cuda(0);

std::unique_ptr<Sequential> mlp_stack(int blocks, int64_t d, int64_t h, float p) {
  manual_seed(31);
  auto net = make<Sequential>();
  for (int i = 0; i < blocks; ++i) {
    net->add(
        make<Residual>(make<Sequential>(make<LayerNorm>(d), make<Linear>(d, h), make<GELU>(),
                                        make<Dropout>(p), make<Linear>(h, d), make<Dropout>(p))));
  }
  net->to(kGpu);
  return net;
}

struct Pass {
  std::vector<Tensor> ys, dxs;
};

Pass run_passes(Module& m, const Shape& x_shape, DType dtype, int micro) {
  for (Parameter* p : m.parameters()) p->zero_grad();
  Pass out;
  for (int i = 0; i < micro; ++i) {
    const Tensor x = test::random_tensor(x_shape, dtype, 100 + i).to(kGpu);
    const Tensor y = m.forward(x);
    const Tensor dy = test::random_tensor(y.shape(), dtype, 200 + i).to(kGpu);
    out.ys.push_back(y);
    out.dxs.push_back(m.backward(dy));
  }
  return out;
}

void expect_bit_identical(const std::function<void(Sequential&)>& transform, DType dtype,
                          const std::string& what) {
  SCOPED_TRACE(what);
  const Shape xs{4, 64, 128};
  auto plain = mlp_stack(4, 128, 512, 0.1f);
  auto other = mlp_stack(4, 128, 512, 0.1f);
  transform(*other);
  const Pass a = run_passes(*plain, xs, dtype, 2);
  const Pass b = run_passes(*other, xs, dtype, 2);
  for (size_t i = 0; i < a.ys.size(); ++i) {
    EXPECT_TRUE(test::bit_identical(b.ys[i], a.ys[i])) << "output " << i;
    EXPECT_TRUE(test::bit_identical(b.dxs[i], a.dxs[i])) << "dx " << i;
  }
  const auto pa = plain->named_parameters(), pb = other->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pb[i].first, pa[i].first);
    EXPECT_TRUE(test::bit_identical(pb[i].second->grad(), pa[i].second->grad()))
        << "gradient of " << pa[i].first;
  }
  std::vector<uint64_t> ga, gb;
  plain->visit_generators("", [&](const std::string&, Generator& g) { ga.push_back(g.offset()); });
  other->visit_generators("", [&](const std::string&, Generator& g) { gb.push_back(g.offset()); });
  EXPECT_EQ(gb, ga);
}

TEST(CheckpointGpuTest, GradientsBitIdenticalWithDropout) {
  STOKER_REQUIRE_GPU();
  for (DType dtype : {DType::f32, DType::bf16}) {
    const std::string dt(dtype_name(dtype));
    expect_bit_identical([](Sequential& s) { checkpoint_every(s, 1); }, dtype,
                         dt + ", every block");
    expect_bit_identical([](Sequential& s) { set_selective_recompute(s, true); }, dtype,
                         dt + ", selective");
    expect_bit_identical(
        [](Sequential& s) {
          checkpoint_every(s, 2);
          set_selective_recompute(s, true);
        },
        dtype, dt + ", every second block + selective");
  }
}

// See tests/nn/checkpoint_test.cpp for the derivation (a = B*d*4, b = B*h*4 bytes):
//   plain N*a + (2N+1)*b, checkpoint every block N*a + 3*b, selective N*a + (N+2)*b.
TEST(CheckpointGpuTest, PeakMemoryFallsAsPredicted) {
  STOKER_REQUIRE_GPU();
  constexpr int kN = 6;
  constexpr int64_t kB = 8, kD = 16, kH = 64;
  constexpr size_t a = kB * kD * 4, b = kB * kH * 4;
  const auto build = [&] {
    manual_seed(32);
    auto net = make<Sequential>();
    for (int i = 0; i < kN; ++i)
      net->add(make<Residual>(
          make<Sequential>(make<Linear>(kD, kH), make<GELU>(), make<Linear>(kH, kD))));
    net->to(kGpu);
    return net;
  };
  const Tensor x = test::random_tensor({kB, kD}, DType::f32, 1).to(kGpu);
  const Tensor dy = test::random_tensor({kB, kD}, DType::f32, 2).to(kGpu);
  const auto peak_of = [&](Module& m) {
    for (Parameter* p : m.parameters()) p->zero_grad();
    m.forward(x);  // warm-up: GEMM plans and autotuning, lazily created gradients
    m.backward(dy);
    for (Parameter* p : m.parameters()) p->zero_grad();
    core::synchronize_device(kGpu);
    core::reset_peak_memory(kGpu);
    const size_t base = core::memory_stats(kGpu).current_bytes;
    {
      const Tensor y = m.forward(x);
      m.backward(dy);
    }
    const core::MemoryStats s = core::memory_stats(kGpu);
    EXPECT_EQ(s.current_bytes, base);
    return s.peak_bytes - base;
  };
  auto plain = build();
  auto ckpt = build();
  checkpoint_every(*ckpt, 1);
  auto selective = build();
  set_selective_recompute(*selective, true);
  EXPECT_EQ(peak_of(*plain), kN * a + (2 * kN + 1) * b);
  EXPECT_EQ(peak_of(*ckpt), kN * a + 3 * b);
  EXPECT_EQ(peak_of(*selective), kN * a + (kN + 2) * b);
  for (size_t i = 0; i < plain->parameters().size(); ++i) {
    EXPECT_TRUE(test::bit_identical(ckpt->parameters()[i]->grad(), plain->parameters()[i]->grad()));
    EXPECT_TRUE(
        test::bit_identical(selective->parameters()[i]->grad(), plain->parameters()[i]->grad()));
  }
}

}  // namespace
}  // namespace stoker::nn
