// The convolutional modules on the GPU against the same modules on the CPU: identical
// initialization (same seed), then forward, backward and accumulated parameter gradients
// compared, for both layouts, a small network in a Sequential, and half-precision inputs
// (f32 master weights, half compute copy, f32 gradients).
#include <gtest/gtest.h>

#include <functional>
#include <memory>

#include "ops/conv_test_util.h"
#include "stoker/nn/batchnorm2d.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/conv2d.h"
#include "stoker/nn/pool.h"
#include "test_util.h"

namespace stoker::test {
namespace {

using ops::shape4;

const Device kGpu = Device::cuda(0);

// Builds the module twice from one seed, runs one CPU and one GPU copy forward and backward on
// the same inputs and compares y, dx and every parameter gradient (rtol relative to each
// tensor's scale) — and BatchNorm buffers, when there are any.
void compare_devices(const std::function<std::unique_ptr<nn::Module>()>& make, const Shape& x_shape,
                     DType dtype, double rtol, int steps = 2) {
  nn::manual_seed(42);
  std::unique_ptr<nn::Module> cpu = make();
  nn::manual_seed(42);
  std::unique_ptr<nn::Module> gpu = make();
  gpu->to(kGpu);
  const auto scale_close = [&](const Tensor& got, const Tensor& want, const std::string& what) {
    const std::vector<float> w = want.to_floats();
    const std::vector<double> wd(w.begin(), w.end());
    EXPECT_TRUE(all_close(got.to_floats(), wd, rtol, rtol * std::max(1.0, max_abs_of(wd))))
        << cpu->describe() << ": " << what;
  };
  for (int step = 0; step < steps; ++step) {
    const Tensor x = random_tensor(x_shape, dtype, 100 + step, -1.0f, 2.0f);
    const Tensor y_cpu = cpu->forward(x);
    const Tensor y_gpu = gpu->forward(x.to(kGpu));
    ASSERT_EQ(y_gpu.device(), kGpu);
    scale_close(y_gpu, y_cpu, "y");
    const Tensor dy = random_tensor(y_cpu.shape(), dtype, 200 + step);
    const Tensor dx_cpu = cpu->backward(dy);
    const Tensor dx_gpu = gpu->backward(dy.to(kGpu));
    scale_close(dx_gpu, dx_cpu, "dx");
  }
  const auto pc = cpu->named_parameters(), pg = gpu->named_parameters();
  ASSERT_EQ(pc.size(), pg.size());
  for (size_t i = 0; i < pc.size(); ++i)
    scale_close(pg[i].second->grad(), pc[i].second->grad(), "grad of " + pc[i].first);
  std::vector<Tensor> bc, bg;
  cpu->visit_buffers("", [&](const std::string&, Tensor& t) { bc.push_back(t); });
  gpu->visit_buffers("", [&](const std::string&, Tensor& t) { bg.push_back(t); });
  ASSERT_EQ(bc.size(), bg.size());
  for (size_t i = 0; i < bc.size(); ++i) scale_close(bg[i], bc[i], "buffer");
}

TEST(ConvLayersGpu, Conv2dMatchesCpu) {
  STOKER_REQUIRE_GPU();
  for (const Layout l : {Layout::nchw, Layout::nhwc}) {
    compare_devices([l] { return nn::make<nn::Conv2d>(5, 3, 3, 1, 1, true, l); },
                    shape4({3, 5, 13, 13}, l), DType::f32, 1e-4);
    compare_devices(
        [l] {
          return nn::make<nn::Conv2d>(
              6, 4, 5, nn::Conv2dOptions{.stride = 2, .padding = 2, .groups = 2, .layout = l});
        },
        shape4({3, 6, 7, 7}, l), DType::f32, 1e-4);
  }
}

TEST(ConvLayersGpu, BatchNormAndPoolsMatchCpu) {
  STOKER_REQUIRE_GPU();
  for (const Layout l : {Layout::nchw, Layout::nhwc}) {
    const Shape shape = shape4({3, 5, 13, 13}, l);
    compare_devices([l] { return nn::make<nn::BatchNorm2d>(5, 1e-5f, 0.1f, l); }, shape, DType::f32,
                    1e-4, 3);
    compare_devices([l] { return nn::make<nn::MaxPool2d>(3, 2, 1, l); }, shape, DType::f32, 1e-5);
    compare_devices([l] { return nn::make<nn::AvgPool2d>(3, 2, 1, l); }, shape, DType::f32, 1e-5);
    compare_devices([l] { return nn::make<nn::GlobalAvgPool>(l); }, shape, DType::f32, 1e-5);
  }
}

TEST(ConvLayersGpu, BatchNormEvalModeMatchesCpu) {
  STOKER_REQUIRE_GPU();
  for (const Layout l : {Layout::nchw, Layout::nhwc}) {
    compare_devices(
        [l] {
          auto bn = nn::make<nn::BatchNorm2d>(5, 1e-5f, 0.1f, l);
          bn->set_training(false);
          return bn;
        },
        shape4({3, 5, 7, 7}, l), DType::f32, 1e-4);
  }
}

// BatchNorm2d with the fused ReLU (set_activation(relu)), training and evaluation mode, f32 and
// bf16: the NHWC path runs the fused kernels, NCHW cuDNN then the ReLU kernels.
TEST(ConvLayersGpu, BatchNormWithFusedReluMatchesCpu) {
  STOKER_REQUIRE_GPU();
  for (const DType dtype : {DType::f32, DType::bf16}) {
    const double rtol = dtype == DType::f32 ? 1e-4 : 3e-2;
    for (const Layout l : {Layout::nchw, Layout::nhwc}) {
      for (const bool training : {true, false}) {
        compare_devices(
            [l, training] {
              auto bn = nn::make<nn::BatchNorm2d>(5, 1e-5f, 0.1f, l);
              bn->set_activation(nn::Activation::relu);
              bn->set_training(training);
              return bn;
            },
            shape4({3, 5, 7, 7}, l), dtype, rtol);
      }
    }
  }
}

// Training on the NHWC kernels the fused module keeps no output (its backward rebuilds the
// ReLU's mask from x), so it has none to hand back; in evaluation mode, and in NCHW, it keeps y.
TEST(ConvLayersGpu, FusedBatchNormKeepsNoOutputWhereTheMaskComesFromX) {
  STOKER_REQUIRE_GPU();
  for (const Layout l : {Layout::nhwc, Layout::nchw}) {
    for (const bool training : {true, false}) {
      auto bn = nn::make<nn::BatchNorm2d>(8, 1e-5f, 0.1f, l);
      bn->set_activation(nn::Activation::relu);
      bn->set_training(training);
      bn->to(kGpu);
      const Tensor x = random_tensor(shape4({2, 8, 5, 5}, l), DType::bf16, 7).to(kGpu);
      bn->forward(x);
      const bool keeps = !(training && l == Layout::nhwc);
      EXPECT_EQ(bn->output_recompute(), keeps ? nn::Module::OutputRecompute::from_own_state
                                              : nn::Module::OutputRecompute::none)
          << ops::layout_name(l) << (training ? " training" : " evaluation");
      const Tensor dx = bn->backward(random_tensor(x.shape(), DType::bf16, 8).to(kGpu));
      EXPECT_EQ(dx.shape(), x.shape());
    }
  }
}

TEST(ConvLayersGpu, SmallNetworkMatchesCpu) {
  STOKER_REQUIRE_GPU();
  for (const Layout l : {Layout::nchw, Layout::nhwc}) {
    compare_devices(
        [l] {
          return std::make_unique<nn::Sequential>(
              nn::make<nn::Conv2d>(3, 8, 3, 1, 1, false, l),
              nn::make<nn::BatchNorm2d>(8, 1e-5f, 0.1f, l), nn::make<nn::MaxPool2d>(2, 2, 0, l),
              nn::make<nn::Conv2d>(8, 16, 3, 2, 1, true, l), nn::make<nn::GlobalAvgPool>(l));
        },
        shape4({4, 3, 16, 16}, l), DType::f32, 2e-4);
  }
}

// Half inputs: the module casts (and for NHWC transposes) its f32 KCRS weight into a compute
// copy; the weight gradient lands in the f32 master gradient.
TEST(ConvLayersGpu, HalfInputsMatchCpu) {
  STOKER_REQUIRE_GPU();
  for (const DType dtype : {DType::f16, DType::bf16}) {
    for (const Layout l : {Layout::nchw, Layout::nhwc}) {
      compare_devices([l] { return nn::make<nn::Conv2d>(5, 4, 3, 2, 1, true, l); },
                      shape4({3, 5, 13, 13}, l), dtype, dtype == DType::f16 ? 5e-3 : 3e-2);
      compare_devices([l] { return nn::make<nn::BatchNorm2d>(5, 1e-5f, 0.1f, l); },
                      shape4({3, 5, 7, 7}, l), dtype, dtype == DType::f16 ? 5e-3 : 3e-2);
    }
  }
}

}  // namespace
}  // namespace stoker::test
