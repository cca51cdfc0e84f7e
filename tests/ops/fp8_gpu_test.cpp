// FP8 ops on the GPU against the CPU reference: the same codes for every input dtype and both
// formats (aligned and misaligned tensors, values spanning the saturation point, NaN), the same
// dequantized values, and the same delayed-scaling history and scale.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "stoker/ops/fp8.h"
#include "test_util.h"

namespace stoker::ops {
namespace {

using test::gpu;

TEST(Fp8OpsGpuTest, CodesAndValuesEqualTheCpus) {
  STOKER_REQUIRE_GPU();
  for (const Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    for (const DType dt : {DType::f32, DType::bf16, DType::f16}) {
      for (const int64_t offset : {0, 1}) {
        Tensor x = test::random_tensor({100003}, dt, 7, -3.0f, 3.0f);
        std::vector<float> v = x.to_floats();
        v[5] = NAN;
        v[6] = 1e4f;  // beyond either format's range once scaled: saturates
        x = Tensor::from_floats(v, {100003}, dt);
        const Tensor scale = Tensor::from_floats({150.0f}, {});
        Tensor codes = Tensor::empty({100003}, DType::u8);
        fp8_quantize(codes, x, scale, f);
        const Tensor dcodes = test::empty_at_offset(100003, DType::u8, gpu(), offset);
        fp8_quantize(dcodes, test::copy_at_offset(x, gpu(), offset), scale.to(gpu()), f);
        ASSERT_EQ(dcodes.to(Device::cpu()).to_vector<uint8_t>(), codes.to_vector<uint8_t>());
        Tensor y = Tensor::empty({100003}, dt), dy = Tensor::empty({100003}, dt, gpu());
        fp8_dequantize(y, codes, scale, f);
        fp8_dequantize(dy, dcodes, scale.to(gpu()), f);
        EXPECT_TRUE(test::identical_up_to_nan_payload(dy.to(Device::cpu()), y));
      }
    }
  }
}

TEST(Fp8OpsGpuTest, DelayedScalingEqualsTheCpus) {
  STOKER_REQUIRE_GPU();
  Tensor h = Tensor::zeros({16}, DType::f32), s = Tensor::from_floats({1.0f}, {});
  Tensor dh = h.to(gpu()), ds = s.to(gpu());
  const float amaxes[] = {0.0f, 3.0f, 0.5f, NAN, 7.0f, 1e-20f, INFINITY, 2.0f};
  for (const float a : amaxes) {
    fp8_update_scale(s, h, Tensor::from_floats({a}, {}), Fp8Format::e4m3, 1);
    fp8_update_scale(ds, dh, Tensor::from_floats({a}, {}).to(gpu()), Fp8Format::e4m3, 1);
  }
  EXPECT_TRUE(test::identical_up_to_nan_payload(dh.to(Device::cpu()), h));
  EXPECT_EQ(ds.to(Device::cpu()).item(), s.item());
}

}  // namespace
}  // namespace stoker::ops
