// ops::normalize_images on the CPU: every element equals fmaf(u8, 1/(255 std), -mean/std)
// rounded to the output dtype, in both layouts (the CUDA kernel computes the same expression;
// loader_gpu_test compares the two bit for bit).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "ops/image.h"
#include "test_util.h"

namespace {

using namespace stoker;

TEST(NormalizeImages, EqualsFmaPerElementInBothLayoutsAndDtypes) {
  const int64_t n = 3, h = 5, w = 7;
  Tensor in = Tensor::empty({n, h, w, 3}, DType::u8);
  std::mt19937 gen(17);
  auto* px = static_cast<uint8_t*>(in.data());
  for (int64_t i = 0; i < in.numel(); ++i) px[i] = static_cast<uint8_t>(gen() & 0xFF);
  px[0] = 0;
  px[1] = 255;  // both ends of the range
  const std::array<float, 3> mean = {0.485f, 0.456f, 0.406f}, std = {0.229f, 0.224f, 0.225f};
  for (const ops::Layout layout : {ops::Layout::nchw, ops::Layout::nhwc}) {
    std::vector<float> want(static_cast<size_t>(in.numel()));
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t p = 0; p < h * w; ++p) {
        for (int c = 0; c < 3; ++c) {
          const float v = std::fmaf(static_cast<float>(px[(i * h * w + p) * 3 + c]),
                                    1.0f / (255.0f * std[c]), -mean[c] / std[c]);
          const int64_t o =
              layout == ops::Layout::nchw ? (i * 3 + c) * h * w + p : (i * h * w + p) * 3 + c;
          want[static_cast<size_t>(o)] = v;
        }
      }
    }
    const Shape shape = layout == ops::Layout::nchw ? Shape{n, 3, h, w} : Shape{n, h, w, 3};
    for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      Tensor out = test::poisoned(shape, dtype);
      ops::normalize_images(out, in, mean, std, layout);
      EXPECT_TRUE(test::bit_identical(out, Tensor::from_floats(want, shape, dtype)))
          << dtype_name(dtype) << (layout == ops::Layout::nchw ? " nchw" : " nhwc");
    }
  }
}

}  // namespace
