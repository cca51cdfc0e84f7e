// LARS on the GPU (kernels/lars.cu) against the CPU backend: the same steps on the same lists
// agree to float rounding (the GPU sums the norms in f32, the CPU in f64), an overflowed step is
// skipped on the device, a step makes no host sync, and lists longer than one launch's group
// are handled.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "stoker/core/stream.h"
#include "stoker/ops/elementwise.h"
#include "stoker/ops/layout.h"
#include "stoker/ops/optim.h"
#include "stoker/optim/optimizer.h"
#include "test_util.h"

using stoker::Device;
using stoker::DType;
using stoker::Shape;
using stoker::Tensor;
using stoker::test::expect_max_abs_close;
using stoker::test::gpu;

namespace {

struct Lists {
  std::vector<Tensor> cpu, gpu;
};

// Tensors of the given sizes with N(0, std) values, on the CPU and copied to the GPU.
Lists make(const std::vector<int64_t>& sizes, uint64_t seed, float std = 1.0f) {
  Lists l;
  for (size_t i = 0; i < sizes.size(); ++i) {
    Tensor t = Tensor::empty({sizes[i]}, DType::f32);
    stoker::ops::random_normal(t, 0.0f, std, seed, i * 1000003);
    l.cpu.push_back(t);
    l.gpu.push_back(t.to(gpu()));
  }
  return l;
}

Lists zeros(const std::vector<int64_t>& sizes) {
  Lists l;
  for (const int64_t n : sizes) {
    l.cpu.push_back(Tensor::zeros({n}, DType::f32));
    l.gpu.push_back(Tensor::zeros({n}, DType::f32, gpu()));
  }
  return l;
}

void expect_close(const Lists& l, const std::string& what) {
  for (size_t i = 0; i < l.cpu.size(); ++i)
    expect_max_abs_close(l.gpu[i].to_floats(), l.cpu[i].to_floats(), 1e-5,
                         what + "[" + std::to_string(i) + "]");
}

// Odd sizes, an empty tensor, tensors spanning several norm chunks (16384) and update chunks
// (65536); every other one adapted.
const std::vector<int64_t> kSizes = {1, 7, 0, 1023, 65537, 4097, 200003, 3, 16385};

TEST(LarsGpuTest, StepsMatchTheCpu) {
  STOKER_REQUIRE_GPU();
  Lists p = make(kSizes, 1), m = zeros(kSizes);
  std::vector<uint8_t> adapt;
  for (size_t i = 0; i < kSizes.size(); ++i) adapt.push_back(i % 2 == 0 ? 1 : 0);
  for (int s = 0; s < 4; ++s) {
    // Step 2's gradients are tiny, so the trust ratios (and the rates) change a lot.
    Lists g = make(kSizes, 10 + s, s == 2 ? 1e-4f : 1.0f);
    const stoker::ops::LarsHyper h{.lr = 4.0f / static_cast<float>(s + 1),
                                   .momentum = 0.9f,
                                   .weight_decay = 5e-4f,
                                   .eta = 0.01f,
                                   .epsilon = s == 3 ? 1e-3f : 0.0f};
    stoker::ops::lars_step(p.cpu, g.cpu, m.cpu, adapt, h);
    stoker::ops::lars_step(p.gpu, g.gpu, m.gpu, adapt, h);
  }
  expect_close(p, "param");
  expect_close(m, "momentum");
}

// Zero weights or zero gradients: trust 1 on both backends (no NaN).
TEST(LarsGpuTest, ZeroNormsGiveTrustOneLikeTheCpu) {
  STOKER_REQUIRE_GPU();
  const std::vector<int64_t> sizes = {100, 20000};
  Lists zero_p = zeros(sizes), p = make(sizes, 2), g = make(sizes, 3), zero_g = zeros(sizes);
  Lists m1 = zeros(sizes), m2 = zeros(sizes);
  const std::vector<uint8_t> adapt = {1, 1};
  const stoker::ops::LarsHyper h{.lr = 0.5f, .weight_decay = 0.1f};
  stoker::ops::lars_step(zero_p.cpu, g.cpu, m1.cpu, adapt, h);
  stoker::ops::lars_step(zero_p.gpu, g.gpu, m1.gpu, adapt, h);
  stoker::ops::lars_step(p.cpu, zero_g.cpu, m2.cpu, adapt, h);
  stoker::ops::lars_step(p.gpu, zero_g.gpu, m2.gpu, adapt, h);
  expect_close(zero_p, "zero weights");
  expect_close(p, "zero gradients");
  // Trust 1 exactly: w = -lr * g for the zero weights.
  const std::vector<float> got = zero_p.gpu[0].to_floats(), gv = g.cpu[0].to_floats();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], -0.5f * gv[i]) << i;
}

TEST(LarsGpuTest, FoundInfOnTheDeviceSkipsTheStep) {
  STOKER_REQUIRE_GPU();
  Lists p = make(kSizes, 4), g = make(kSizes, 5), m = make(kSizes, 6);
  const std::vector<uint8_t> adapt(kSizes.size(), 1);
  std::vector<Tensor> p0, m0;
  for (size_t i = 0; i < kSizes.size(); ++i) {
    p0.push_back(p.gpu[i].to(Device::cpu()));
    m0.push_back(m.gpu[i].to(Device::cpu()));
  }
  const Tensor flag = Tensor::from_floats({1.0f}, {}, DType::f32, gpu());
  stoker::ops::lars_step(p.gpu, g.gpu, m.gpu, adapt, {.lr = 1.0f}, flag);
  for (size_t i = 0; i < kSizes.size(); ++i) {
    EXPECT_TRUE(stoker::test::bit_identical(p.gpu[i], p0[i])) << i;
    EXPECT_TRUE(stoker::test::bit_identical(m.gpu[i], m0[i])) << i;
  }
  stoker::ops::fill(flag, 0.0);
  stoker::ops::lars_step(p.gpu, g.gpu, m.gpu, adapt, {.lr = 1.0f}, flag);
  EXPECT_FALSE(stoker::test::bit_identical(p.gpu[4], p0[4]));
}

// More tensors than one launch takes (256): each group's norms, rates and update.
TEST(LarsGpuTest, LongListsMatchTheCpu) {
  STOKER_REQUIRE_GPU();
  std::vector<int64_t> sizes;
  for (int i = 0; i < 600; ++i) sizes.push_back(1 + (i * 37) % 300);
  Lists p = make(sizes, 7), g = make(sizes, 8), m = zeros(sizes);
  std::vector<uint8_t> adapt;
  for (size_t i = 0; i < sizes.size(); ++i) adapt.push_back(i % 3 != 0 ? 1 : 0);
  const stoker::ops::LarsHyper h{.lr = 2.0f, .weight_decay = 1e-3f, .eta = 0.02f};
  for (int s = 0; s < 2; ++s) {
    stoker::ops::lars_step(p.cpu, g.cpu, m.cpu, adapt, h);
    stoker::ops::lars_step(p.gpu, g.gpu, m.gpu, adapt, h);
  }
  expect_close(p, "param");
  expect_close(m, "momentum");
}

// The optimizer on GPU parameters: the CPU optimizer's weights, and no host sync in step().
TEST(LarsGpuTest, OptimizerMatchesTheCpuWithoutHostSyncs) {
  STOKER_REQUIRE_GPU();
  const std::vector<Shape> shapes = {{64, 3, 7, 7}, {64}, {64}, {1000, 512}, {1000}};
  std::vector<std::unique_ptr<stoker::nn::Parameter>> cpu, dev;
  stoker::optim::NamedParameters cpu_named, dev_named;
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor v = stoker::test::random_normal_tensor(shapes[i], DType::f32, 20 + i, 0.0f, 0.1f);
    cpu.push_back(std::make_unique<stoker::nn::Parameter>(v));
    dev.push_back(std::make_unique<stoker::nn::Parameter>(v.to(gpu())));
    cpu_named.emplace_back("p" + std::to_string(i), cpu.back().get());
    dev_named.emplace_back("p" + std::to_string(i), dev.back().get());
  }
  const stoker::optim::LarsOptions o{.lr = 10.0f, .weight_decay = 5e-5f};
  stoker::optim::LARS a(cpu_named, o), b(dev_named, o);
  const Tensor found_inf = Tensor::zeros({}, DType::f32, gpu());
  b.set_found_inf(found_inf);
  for (int s = 0; s < 3; ++s) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      const Tensor g = stoker::test::random_normal_tensor(shapes[i], DType::f32, 40 + 10 * s + i);
      stoker::ops::copy(cpu[i]->grad(), g);
      stoker::ops::copy(dev[i]->grad(), g.to(gpu()));
    }
    a.set_lr(10.0f / static_cast<float>(s + 1));
    b.set_lr(10.0f / static_cast<float>(s + 1));
    stoker::core::synchronize_device(gpu());
    const uint64_t syncs = stoker::core::host_sync_count();
    b.step();
    EXPECT_EQ(stoker::core::host_sync_count(), syncs) << "step " << s;
    a.step();
  }
  for (size_t i = 0; i < shapes.size(); ++i)
    expect_max_abs_close(dev[i]->value().to_floats(), cpu[i]->value().to_floats(), 1e-5,
                         "p" + std::to_string(i));
}

}  // namespace
