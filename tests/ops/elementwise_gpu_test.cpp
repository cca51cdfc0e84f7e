// add, mul, axpy and scale on the GPU against the CPU reference: BIT-identical (one fp32
// expression, one rounding; axpy is fmaf on both), on aligned and misaligned views.
#include <gtest/gtest.h>

#include <vector>

#include "test_util.h"

namespace stoker::ops {
namespace {

using test::bit_identical;
using test::gpu;

constexpr DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};
constexpr int64_t kSizes[] = {1, 7, 1023, 4097, (1 << 20) + 3};

using BinaryOp = void (*)(const Tensor&, const Tensor&, const Tensor&);

void check_binary(BinaryOp op, const char* name) {
  uint64_t seed = 10;
  for (DType d : kFloatTypes) {
    for (int64_t n : kSizes) {
      for (int64_t offset : {0, 1}) {
        const Tensor a = test::random_normal_tensor({n}, d, seed++, 0.0f, 4.0f);
        const Tensor b = test::random_normal_tensor({n}, d, seed++, 1.0f, 2.0f);
        const Tensor host_out = test::poisoned({n}, d);
        op(host_out, a, b);
        const Tensor dev_out = test::empty_at_offset(n, d, gpu(), offset);
        test::poison(dev_out);
        op(dev_out, test::copy_at_offset(a, gpu(), offset), test::copy_at_offset(b, gpu(), 0));
        ASSERT_TRUE(bit_identical(dev_out, host_out))
            << name << " " << dtype_name(d) << " n " << n << " offset " << offset;
      }
    }
  }
}

TEST(ElementwiseGpuTest, AddIsBitIdenticalToCpu) {
  STOKER_REQUIRE_GPU();
  check_binary(add, "add");
}

TEST(ElementwiseGpuTest, MulIsBitIdenticalToCpu) {
  STOKER_REQUIRE_GPU();
  check_binary(mul, "mul");
}

TEST(ElementwiseGpuTest, InPlaceAliasing) {
  STOKER_REQUIRE_GPU();
  for (DType d : kFloatTypes) {
    const Tensor a = test::random_normal_tensor({4097}, d, 3);
    const Tensor b = test::random_normal_tensor({4097}, d, 4);
    const Tensor da = a.to(gpu()), db = b.to(gpu());
    mul(a, a, b);
    mul(da, da, db);
    EXPECT_TRUE(bit_identical(da, a)) << dtype_name(d);
    add(b, b, b);
    add(db, db, db);
    EXPECT_TRUE(bit_identical(db, b)) << dtype_name(d);
  }
}

TEST(ElementwiseGpuTest, AxpyIsBitIdenticalToCpuForEveryDtypePair) {
  STOKER_REQUIRE_GPU();
  uint64_t seed = 100;
  for (DType yd : kFloatTypes) {
    for (DType xd : kFloatTypes) {
      for (int64_t n : kSizes) {
        for (int64_t offset : {0, 1}) {
          const float alpha = offset ? -0.37f : 1.5f;
          const Tensor x = test::random_normal_tensor({n}, xd, seed++, 0.0f, 3.0f);
          const Tensor y = test::random_normal_tensor({n}, yd, seed++, 0.0f, 3.0f);
          const Tensor dy = test::copy_at_offset(y, gpu(), offset);
          axpy(dy, alpha, test::copy_at_offset(x, gpu(), 1 - offset));
          axpy(y, alpha, x);
          ASSERT_TRUE(bit_identical(dy, y)) << "y " << dtype_name(yd) << " x " << dtype_name(xd)
                                            << " n " << n << " offset " << offset;
        }
      }
    }
  }
}

TEST(ElementwiseGpuTest, ScaleIsBitIdenticalToCpu) {
  STOKER_REQUIRE_GPU();
  uint64_t seed = 300;
  for (DType d : kFloatTypes) {
    for (int64_t n : kSizes) {
      for (int64_t offset : {0, 1}) {
        const Tensor x = test::random_normal_tensor({n}, d, seed++, 0.0f, 10.0f);
        const Tensor dx = test::copy_at_offset(x, gpu(), offset);
        scale(x, 0.3f);
        scale(dx, 0.3f);
        ASSERT_TRUE(bit_identical(dx, x)) << dtype_name(d) << " n " << n << " offset " << offset;
      }
    }
  }
}

TEST(ElementwiseGpuTest, SpecialValuesMatchCpu) {
  STOKER_REQUIRE_GPU();
  const std::vector<float> av = {test::kNaN, test::kInf, 60000.0f, -0.0f, 1e-39f, 1.0f, 3.0f};
  const std::vector<float> bv = {1.0f, -test::kInf, 60000.0f, -0.0f, 1e-39f, test::kNaN, -3.0f};
  for (DType d : kFloatTypes) {
    const Tensor a = Tensor::from_floats(av, {7}, d), b = Tensor::from_floats(bv, {7}, d);
    for (BinaryOp op : {add, mul}) {
      const Tensor out = test::poisoned({7}, d);
      const Tensor dout = test::poisoned({7}, d, gpu());
      op(out, a, b);
      op(dout, a.to(gpu()), b.to(gpu()));
      // NaN results need only be NaN: their payload bits are the hardware's choice.
      EXPECT_TRUE(test::identical_up_to_nan_payload(dout, out)) << dtype_name(d);
    }
  }
}

TEST(ElementwiseGpuTest, MixedDevicesThrowNamingBoth) {
  STOKER_REQUIRE_GPU();
  const Tensor dev = Tensor::empty({4}, DType::f32, gpu());
  const Tensor host = Tensor::empty({4}, DType::f32);
  EXPECT_TRUE(test::throws_error_with([&] { add(dev, dev, host); },
                                      {"ops::add", "out is f32[4] on cuda:0", "b is f32[4] on cpu",
                                       "expected both on one device", "Tensor::to"}));
  EXPECT_TRUE(test::throws_error_with([&] { mul(host, dev, dev); },
                                      {"ops::mul", "out is f32[4] on cpu", "a is f32[4] on cuda:0",
                                       "expected both on one device"}));
  EXPECT_TRUE(
      test::throws_error_with([&] { axpy(dev, 1.0f, host); },
                              {"ops::axpy", "y is f32[4] on cuda:0", "x is f32[4] on cpu"}));
}

}  // namespace
}  // namespace stoker::ops
