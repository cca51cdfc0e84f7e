// Philox fills on the GPU against the CPU reference: BIT-identical for every dtype, size, seed
// and offset (both call core/rng.h per element), including misaligned views.
#include <gtest/gtest.h>

#include "test_util.h"

namespace stoker::ops {
namespace {

using test::bit_identical;
using test::gpu;

constexpr DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};
constexpr int64_t kSizes[] = {1, 7, 1023, 4097, (1 << 20) + 3};

TEST(RandomGpuTest, UniformAndNormalAreBitIdenticalToCpu) {
  STOKER_REQUIRE_GPU();
  struct Draw {
    uint64_t seed, offset;
  };
  const Draw draws[] = {{0, 0}, {42, 7}, {0xdeadbeefcafef00dull, (1ull << 33) + 5}};
  for (DType d : kFloatTypes) {
    for (int64_t n : kSizes) {
      for (const Draw& w : draws) {
        for (int64_t offset : {0, 1}) {
          const Tensor host = test::poisoned({n}, d);
          const Tensor dev = test::empty_at_offset(n, d, gpu(), offset);
          test::poison(dev);
          random_uniform(host, -2.0f, 3.0f, w.seed, w.offset);
          random_uniform(dev, -2.0f, 3.0f, w.seed, w.offset);
          ASSERT_TRUE(bit_identical(dev, host))
              << "uniform " << dtype_name(d) << " n " << n << " seed " << w.seed;
          test::poison(host);
          test::poison(dev);
          random_normal(host, 0.5f, 2.0f, w.seed, w.offset);
          random_normal(dev, 0.5f, 2.0f, w.seed, w.offset);
          ASSERT_TRUE(bit_identical(dev, host)) << "normal " << dtype_name(d) << " n " << n
                                                << " seed " << w.seed << " offset " << offset;
        }
      }
    }
  }
}

TEST(RandomGpuTest, GeneratorDrawsMatchCpu) {
  STOKER_REQUIRE_GPU();
  Generator host_gen(99), dev_gen(99);
  for (int64_t n : {5, 4097, 3}) {
    const Tensor host = test::poisoned({n}, DType::bf16);
    const Tensor dev = test::poisoned({n}, DType::bf16, gpu());
    random_normal(host, 0.0f, 1.0f, host_gen);
    random_normal(dev, 0.0f, 1.0f, dev_gen);
    EXPECT_TRUE(bit_identical(dev, host)) << n;
  }
  EXPECT_EQ(dev_gen.offset(), host_gen.offset());
}

TEST(RandomGpuTest, RepeatedFillsAreIdenticalAndOffsetsDiffer) {
  STOKER_REQUIRE_GPU();
  const Tensor a = Tensor::empty({4097}, DType::f32, gpu());
  const Tensor b = Tensor::empty({4097}, DType::f32, gpu());
  random_uniform(a, 0.0f, 1.0f, 3, 11);
  random_uniform(b, 0.0f, 1.0f, 3, 11);
  EXPECT_TRUE(bit_identical(a, b));
  random_uniform(b, 0.0f, 1.0f, 3, 12);
  const std::vector<float> x = a.to_floats(), y = b.to_floats();
  int same = 0;
  for (size_t i = 0; i < x.size(); ++i) same += x[i] == y[i];
  EXPECT_LT(same, 10);
}

}  // namespace
}  // namespace stoker::ops
