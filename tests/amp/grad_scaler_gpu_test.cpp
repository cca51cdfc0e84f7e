#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "stoker/amp/precision.h"
#include "stoker/ops/elementwise.h"
#include "test_util.h"

using stoker::Device;
using stoker::DType;
using stoker::Tensor;
using stoker::amp::GradScaler;

namespace {

// The same gradient stream (with overflows at fixed steps) through a CPU and a GPU scaler: the
// decisions (found_inf, scale, tracker) and the unscaled gradients agree at every step.
TEST(GradScalerGpuTest, DecisionsAndUnscaledGradientsMatchCpu) {
  STOKER_REQUIRE_GPU();
  const stoker::amp::GradScalerOptions o{
      .init_scale = 1024.0f, .growth_interval = 3, .hysteresis = 2};
  GradScaler cpu(Device::cpu(), o), gpu(Device::cuda(0), o);
  const std::vector<int64_t> sizes = {1, 7, 1023, 70000, 0, 4097};
  for (int step = 0; step < 12; ++step) {
    std::vector<Tensor> gc, gg;
    for (size_t t = 0; t < sizes.size(); ++t) {
      Tensor g = Tensor::empty({sizes[t]}, DType::f32);
      stoker::ops::random_normal(g, 0.0f, 1000.0f, 40 + step, t * 100000);
      if ((step == 4 || step == 5 || step == 9) && sizes[t] > 100)
        g.data<float>()[sizes[t] - 1] = step == 5 ? NAN : -INFINITY;
      gc.push_back(g);
      gg.push_back(g.to(Device::cuda(0)));
    }
    cpu.unscale(gc);
    gpu.unscale(gg);
    ASSERT_EQ(cpu.found_inf().item(), gpu.found_inf().item()) << "step " << step;
    for (size_t t = 0; t < sizes.size(); ++t) {
      const auto a = gc[t].to_vector<float>(), b = gg[t].to_vector<float>();
      for (size_t i = 0; i < a.size(); ++i)
        ASSERT_TRUE(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))
            << "step " << step << " tensor " << t << " element " << i;
    }
    cpu.update();
    gpu.update();
    ASSERT_EQ(cpu.scale_value(), gpu.scale_value()) << "step " << step;
    ASSERT_EQ(cpu.growth_tracker(), gpu.growth_tracker()) << "step " << step;
  }
}

// No host sync in unscale + update (the counter stays put until a value is read).
TEST(GradScalerGpuTest, UnscaleAndUpdateDoNotSyncTheHost) {
  STOKER_REQUIRE_GPU();
  GradScaler s(Device::cuda(0));
  Tensor g = Tensor::empty({1 << 20}, DType::f32, Device::cuda(0));
  stoker::ops::random_normal(g, 0.0f, 1.0f, 3, 0);
  const std::vector<Tensor> grads{g};
  s.unscale(grads);  // warm-up (allocations, module load)
  s.update();
  const uint64_t before = stoker::core::host_sync_count();
  for (int i = 0; i < 10; ++i) {
    s.unscale(grads);
    s.update();
  }
  EXPECT_EQ(stoker::core::host_sync_count(), before);
}

}  // namespace
