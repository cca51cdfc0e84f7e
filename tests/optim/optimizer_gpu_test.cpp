#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "stoker/ops/elementwise.h"
#include "stoker/ops/layout.h"
#include "stoker/ops/optim.h"
#include "test_util.h"

using stoker::Device;
using stoker::DType;
using stoker::Tensor;

namespace {

// Lists of tensors of assorted sizes (odd, empty, larger than a chunk), on the CPU and copied to
// the GPU, with fresh random values.
struct Lists {
  std::vector<Tensor> cpu, gpu;
};
Lists make(const std::vector<int64_t>& sizes, uint64_t seed) {
  Lists l;
  for (size_t i = 0; i < sizes.size(); ++i) {
    Tensor t = Tensor::empty({sizes[i]}, DType::f32);
    stoker::ops::random_normal(t, 0.0f, 1.0f, seed, i * 100000);
    l.cpu.push_back(t);
    l.gpu.push_back(t.to(Device::cuda(0)));
  }
  return l;
}

void expect_bit_equal(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    const auto x = a[i].to_vector<float>(), y = b[i].to_vector<float>();
    ASSERT_EQ(0, std::memcmp(x.data(), y.data(), x.size() * 4)) << "tensor " << i;
  }
}

const std::vector<int64_t> kSizes = {1, 7, 0, 1023, 65537, 4097, 200003, 3};

// `steps` AdamW steps on the CPU lists and on the GPU lists: parameters and both moments equal
// bit for bit after them.
void expect_adamw_steps_match_cpu(const Lists& p, const Lists& g, const Lists& m, const Lists& v,
                                  int steps) {
  for (int s = 1; s <= steps; ++s) {
    const stoker::ops::AdamWHyper h{.lr = 1e-2f, .weight_decay = 0.05f, .step = s};
    stoker::ops::adamw_step(p.cpu, g.cpu, m.cpu, v.cpu, h);
    stoker::ops::adamw_step(p.gpu, g.gpu, m.gpu, v.gpu, h);
  }
  expect_bit_equal(p.cpu, p.gpu);
  expect_bit_equal(m.cpu, m.gpu);
  expect_bit_equal(v.cpu, v.gpu);
}

TEST(OptimizerGpuTest, SgdNesterovBitIdenticalToCpu) {
  STOKER_REQUIRE_GPU();
  auto p = make(kSizes, 1), g = make(kSizes, 2), b = make(kSizes, 3);
  for (int s = 0; s < 3; ++s) {
    const stoker::ops::SgdHyper h{.lr = 0.1f,
                                  .momentum = 0.9f,
                                  .weight_decay = 1e-2f,
                                  .nesterov = true,
                                  .first_step = s == 0};
    stoker::ops::sgd_step(p.cpu, g.cpu, b.cpu, h);
    stoker::ops::sgd_step(p.gpu, g.gpu, b.gpu, h);
  }
  expect_bit_equal(p.cpu, p.gpu);
  expect_bit_equal(b.cpu, b.gpu);
}

TEST(OptimizerGpuTest, AdamWBitIdenticalToCpuAndSkipsOnFoundInf) {
  STOKER_REQUIRE_GPU();
  auto p = make(kSizes, 4), g = make(kSizes, 5), m = make(kSizes, 6), v = make(kSizes, 7);
  for (auto* l : {&v}) {
    for (size_t i = 0; i < l->cpu.size(); ++i) {  // second moments are non-negative
      stoker::ops::random_uniform(l->cpu[i], 0.0f, 2.0f, 9, i * 100000);
      l->gpu[i] = l->cpu[i].to(Device::cuda(0));
    }
  }
  expect_adamw_steps_match_cpu(p, g, m, v, 3);
  // found_inf set on the device: nothing changes.
  const Tensor flag = Tensor::from_floats({1.0f}, {}, DType::f32, Device::cuda(0));
  std::vector<Tensor> before;
  for (const Tensor& t : p.gpu) before.push_back(t.to(Device::cpu()));
  stoker::ops::adamw_step(p.gpu, g.gpu, m.gpu, v.gpu, {.step = 4}, flag);
  expect_bit_equal(before, p.gpu);
}

// Parameters, gradients and moments that start one element past a 16-byte boundary (views into
// larger tensors) take the element-at-a-time path of the multi-tensor update, the aligned ones
// its 4-element path: both give the CPU's bits.
TEST(OptimizerGpuTest, AdamWOnMisalignedViewsIsBitIdenticalToCpu) {
  STOKER_REQUIRE_GPU();
  const std::vector<int64_t> sizes = {4099, 65540, 12};
  std::vector<Lists> lists;  // p, g, m, v
  for (uint64_t seed = 31; seed < 35; ++seed) {
    Lists l;
    for (size_t i = 0; i < sizes.size(); ++i) {
      Tensor big = Tensor::empty({sizes[i] + 1}, DType::f32);
      stoker::ops::random_uniform(big, 0.0f, 2.0f, seed, i * 1000);  // v >= 0 too
      l.cpu.push_back(big.slice(1, sizes[i] + 1));
      l.gpu.push_back(big.to(Device::cuda(0)).slice(1, sizes[i] + 1));
    }
    lists.push_back(std::move(l));
  }
  const Lists &p = lists[0], &g = lists[1], &m = lists[2], &v = lists[3];
  expect_adamw_steps_match_cpu(p, g, m, v, 2);
}

// The half compute copies written in the update's pass: the CPU's bits (its update, then cast),
// for bf16 and f16, with some entries undefined; untouched on a skipped step.
TEST(OptimizerGpuTest, AdamWWritesComputeCopiesWithTheCpusBits) {
  STOKER_REQUIRE_GPU();
  for (const DType half : {DType::bf16, DType::f16}) {
    auto p = make(kSizes, 14), g = make(kSizes, 15), m = make(kSizes, 16), v = make(kSizes, 17);
    for (size_t i = 0; i < v.cpu.size(); ++i) {
      stoker::ops::random_uniform(v.cpu[i], 0.0f, 2.0f, 18, i * 100000);
      v.gpu[i] = v.cpu[i].to(Device::cuda(0));
    }
    std::vector<Tensor> hc, hg;
    for (size_t i = 0; i < kSizes.size(); ++i) {
      const bool with = i % 3 != 1;  // some parameters without a copy
      hc.push_back(with ? Tensor::zeros({kSizes[i]}, half) : Tensor());
      hg.push_back(with ? Tensor::zeros({kSizes[i]}, half, Device::cuda(0)) : Tensor());
    }
    const stoker::ops::AdamWHyper h{.lr = 1e-2f, .weight_decay = 0.05f, .step = 1};
    stoker::ops::adamw_step(p.cpu, g.cpu, m.cpu, v.cpu, h, {}, {}, hc);
    stoker::ops::adamw_step(p.gpu, g.gpu, m.gpu, v.gpu, h, {}, {}, hg);
    expect_bit_equal(p.cpu, p.gpu);
    for (size_t i = 0; i < hc.size(); ++i) {
      if (!hc[i].defined()) continue;
      const Tensor got = hg[i].to(Device::cpu());
      Tensor want = Tensor::empty(hc[i].shape(), half);
      stoker::ops::cast(want, p.cpu[i]);
      ASSERT_EQ(0, std::memcmp(got.data(), want.data(), want.nbytes())) << "copy " << i;
      ASSERT_EQ(0, std::memcmp(hc[i].data(), want.data(), want.nbytes())) << "cpu copy " << i;
    }
    const Tensor flag = Tensor::from_floats({1.0f}, {}, DType::f32, Device::cuda(0));
    const Tensor before = hg[0].to(Device::cpu());
    stoker::ops::adamw_step(p.gpu, g.gpu, m.gpu, v.gpu, {.step = 2}, flag, {}, hg);
    const Tensor after = hg[0].to(Device::cpu());
    ASSERT_EQ(0, std::memcmp(before.data(), after.data(), before.nbytes()));
  }
}

// The device step count (bias corrections) advances identically on both backends, including
// across a step skipped by found_inf.
TEST(OptimizerGpuTest, AdamWDeviceStepStateMatchesCpuAcrossASkip) {
  STOKER_REQUIRE_GPU();
  auto p = make(kSizes, 20), g = make(kSizes, 21), m = make(kSizes, 22), v = make(kSizes, 23);
  for (size_t i = 0; i < v.cpu.size(); ++i) {
    stoker::ops::random_uniform(v.cpu[i], 0.0f, 2.0f, 24, i * 100000);
    v.gpu[i] = v.cpu[i].to(Device::cuda(0));
  }
  const Tensor sc = stoker::ops::adamw_step_state_create(Device::cpu());
  const Tensor sg = stoker::ops::adamw_step_state_create(Device::cuda(0));
  Tensor fc = Tensor::from_floats({0.0f}, {});
  for (int s = 0; s < 4; ++s) {
    stoker::ops::fill(fc, s == 2 ? 1.0 : 0.0);
    const Tensor fg = fc.to(Device::cuda(0));
    const stoker::ops::AdamWHyper h{.lr = 1e-2f, .weight_decay = 0.05f};
    stoker::ops::adamw_step(p.cpu, g.cpu, m.cpu, v.cpu, h, fc, sc);
    stoker::ops::adamw_step(p.gpu, g.gpu, m.gpu, v.gpu, h, fg, sg);
  }
  EXPECT_EQ(stoker::ops::adamw_step_state_steps(sc), 3);
  EXPECT_EQ(stoker::ops::adamw_step_state_steps(sg), 3);
  expect_bit_equal(p.cpu, p.gpu);
  expect_bit_equal(m.cpu, m.gpu);
  expect_bit_equal(v.cpu, v.gpu);
}

TEST(OptimizerGpuTest, ManyTensorsUseSeveralLaunches) {
  STOKER_REQUIRE_GPU();
  std::vector<int64_t> sizes(1100);
  for (size_t i = 0; i < sizes.size(); ++i) sizes[i] = 1 + static_cast<int64_t>((i * 37) % 300);
  auto p = make(sizes, 10), g = make(sizes, 11);
  stoker::ops::sgd_step(p.cpu, g.cpu, {}, {.lr = 0.5f});
  stoker::ops::sgd_step(p.gpu, g.gpu, {}, {.lr = 0.5f});
  expect_bit_equal(p.cpu, p.gpu);
}

TEST(OptimizerGpuTest, ClipByTotalNormMatchesCpu) {
  STOKER_REQUIRE_GPU();
  auto x = make(kSizes, 12);
  const Tensor norm_cpu = stoker::ops::l2_norm(x.cpu);
  const Tensor norm_gpu = norm_cpu.to(Device::cuda(0));  // same factor on both sides
  stoker::ops::clip_by_total_norm(x.cpu, norm_cpu, 1.0f);
  stoker::ops::clip_by_total_norm(x.gpu, norm_gpu, 1.0f);
  expect_bit_equal(x.cpu, x.gpu);
  EXPECT_NEAR(stoker::ops::l2_norm(x.gpu).item(), 1.0, 1e-4);
}

TEST(OptimizerGpuTest, LossMonitorTracksFirstBadStep) {
  STOKER_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  const Tensor m = stoker::ops::loss_monitor_create(gpu);
  const float losses[] = {2.0f, 1.5f, NAN, 1.0f, INFINITY};
  for (int s = 0; s < 5; ++s)
    stoker::ops::loss_monitor_update(m, Tensor::from_floats({losses[s]}, {}, DType::f32, gpu), s);
  const auto st = stoker::ops::loss_monitor_read(m, true);
  EXPECT_EQ(st.first_bad_step, 2);
  EXPECT_EQ(st.steps, 3);
  EXPECT_DOUBLE_EQ(st.loss_sum, 4.5);
  EXPECT_EQ(st.last_finite_step, 3);
  EXPECT_FLOAT_EQ(st.last_finite_loss, 1.0f);
  EXPECT_EQ(stoker::ops::loss_monitor_read(m, false).steps, 0);
  // The step number read on the device (a CUDA-graph step), in place of the host's argument.
  const Tensor step = Tensor::zeros({}, DType::i64, gpu);
  stoker::ops::fill(step, 41.0);
  stoker::ops::loss_monitor_update(m, Tensor::from_floats({NAN}, {}, DType::f32, gpu), 0, step);
  EXPECT_EQ(stoker::ops::loss_monitor_read(m, true).first_bad_step, 2);  // the first stays
  const Tensor fresh = stoker::ops::loss_monitor_create(gpu);
  stoker::ops::loss_monitor_update(fresh, Tensor::from_floats({NAN}, {}, DType::f32, gpu), 0, step);
  EXPECT_EQ(stoker::ops::loss_monitor_read(fresh, true).first_bad_step, 41);
}

// AdamW with its learning rate on the device: the host-lr update's bits on the GPU too.
TEST(OptimizerGpuTest, AdamWDeviceLearningRateGivesTheHostBits) {
  STOKER_REQUIRE_GPU();
  auto p = make(kSizes, 20), q = make(kSizes, 20), g = make(kSizes, 21);
  auto m1 = make(kSizes, 22), m2 = make(kSizes, 22), v1 = make(kSizes, 23), v2 = make(kSizes, 23);
  for (auto* l : {&v1, &v2})
    for (size_t i = 0; i < l->gpu.size(); ++i) {
      stoker::ops::random_uniform(l->cpu[i], 0.0f, 2.0f, 24, i * 100000);
      l->gpu[i] = l->cpu[i].to(Device::cuda(0));
    }
  const Tensor st1 = stoker::ops::adamw_step_state_create(Device::cuda(0));
  const Tensor st2 = stoker::ops::adamw_step_state_create(Device::cuda(0));
  const Tensor lr = Tensor::zeros({}, DType::f32, Device::cuda(0));
  for (int s = 1; s <= 3; ++s) {
    const float rate = 3e-3f / static_cast<float>(s);
    stoker::ops::adamw_step(p.gpu, g.gpu, m1.gpu, v1.gpu, {.lr = rate, .weight_decay = 0.1f}, {},
                            st1);
    stoker::ops::fill(lr, rate);
    stoker::ops::adamw_step(q.gpu, g.gpu, m2.gpu, v2.gpu, {.lr = 99.0f, .weight_decay = 0.1f}, {},
                            st2, {}, lr);
  }
  expect_bit_equal(p.gpu, q.gpu);
  expect_bit_equal(m1.gpu, m2.gpu);
  expect_bit_equal(v1.gpu, v2.gpu);
}

// SGD (momentum, Nesterov, weight decay) and LARS with the rate on the device: the host-rate
// update's bits on the GPU too, over a falling rate.
TEST(OptimizerGpuTest, SgdAndLarsDeviceLearningRateGivesTheHostBits) {
  STOKER_REQUIRE_GPU();
  const Tensor lr = Tensor::zeros({}, DType::f32, Device::cuda(0));
  auto p = make(kSizes, 30), q = make(kSizes, 30), g = make(kSizes, 31);
  auto b1 = make(kSizes, 32), b2 = make(kSizes, 32);
  std::vector<uint8_t> adapt;
  for (size_t i = 0; i < kSizes.size(); ++i) adapt.push_back(i % 2 == 0 ? 1 : 0);
  for (int s = 1; s <= 3; ++s) {
    const float rate = 0.1f / static_cast<float>(s);
    stoker::ops::fill(lr, rate);
    const stoker::ops::SgdHyper h{
        .lr = rate, .momentum = 0.9f, .weight_decay = 1e-3f, .nesterov = true};
    stoker::ops::sgd_step(p.gpu, g.gpu, b1.gpu, h, {});
    stoker::ops::SgdHyper nonsense = h;
    nonsense.lr = 99.0f;
    stoker::ops::sgd_step(q.gpu, g.gpu, b2.gpu, nonsense, {}, lr);
  }
  expect_bit_equal(p.gpu, q.gpu);
  expect_bit_equal(b1.gpu, b2.gpu);
  for (int s = 1; s <= 3; ++s) {
    const float rate = 2.0f / static_cast<float>(s);
    stoker::ops::fill(lr, rate);
    stoker::ops::lars_step(p.gpu, g.gpu, b1.gpu, adapt,
                           {.lr = rate, .weight_decay = 5e-5f, .eta = 0.01f});
    stoker::ops::lars_step(q.gpu, g.gpu, b2.gpu, adapt,
                           {.lr = 99.0f, .weight_decay = 5e-5f, .eta = 0.01f}, {}, lr);
  }
  expect_bit_equal(p.gpu, q.gpu);
  expect_bit_equal(b1.gpu, b2.gpu);
}

}  // namespace
