// SwiGLU on the GPU (ops/activation.h: swiglu_forward / swiglu_backward) against the CPU
// reference, bit for bit in f32, f16 and bf16: both backends run ops/swiglu_math.h (portable
// exp, IEEE division, no contracted products) and round with core/half.h's conversions. Odd F
// (the scalar path), Llama 3.2 1B's F = 8192 (16-byte Packs), misaligned buffers (scalar path
// on Pack-sized rows), and the backward in place (dx = x). Outputs are poisoned (NaN) first.
#include <gtest/gtest.h>

#include <string>

#include "stoker/ops/activation.h"
#include "test_util.h"

namespace stoker::ops {
namespace {

using test::bit_identical;
using test::gpu;

TEST(SwiGluGpuTest, EqualsTheCpuReferenceToTheBit) {
  STOKER_REQUIRE_GPU();
  uint32_t seed = 300;
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    for (const auto& [rows, f] :
         {std::pair<int64_t, int64_t>{1, 1}, {5, 13}, {3, 8192}, {64, 256}}) {
      for (const int64_t offset : {0, 1}) {
        const std::string what = std::string(dtype_name(d)) + " [" + std::to_string(rows) + ", 2*" +
                                 std::to_string(f) + "] offset " + std::to_string(offset);
        const Tensor x = test::random_tensor({rows, 2 * f}, d, seed++, -8.0f, 8.0f);
        const Tensor dy = test::random_tensor({rows, f}, d, seed++);
        const Tensor y = test::poisoned({rows, f}, d), dx = test::poisoned({rows, 2 * f}, d);
        swiglu_forward(y, x);
        swiglu_backward(dx, dy, x);

        const Tensor gx = test::copy_at_offset(x, gpu(), offset);
        const Tensor gdy = test::copy_at_offset(dy, gpu(), offset);
        const Tensor gy = test::empty_at_offset(rows * f, d, gpu(), offset).reshape({rows, f});
        const Tensor gdx =
            test::empty_at_offset(rows * 2 * f, d, gpu(), offset).reshape({rows, 2 * f});
        test::poison(gy);
        test::poison(gdx);
        swiglu_forward(gy, gx);
        swiglu_backward(gdx, gdy, gx);
        EXPECT_TRUE(bit_identical(gy, y)) << "y " << what;
        EXPECT_TRUE(bit_identical(gdx, dx)) << "dx " << what;
        swiglu_backward(gx, gdy, gx);  // in place over x
        EXPECT_TRUE(bit_identical(gx, dx)) << "dx in place " << what;
      }
    }
  }
}

}  // namespace
}  // namespace stoker::ops
