// sum / max_abs / l2_norm on the GPU against the CPU reference: within 1e-5 relative (the GPU
// accumulates an fp32 tree, the CPU fp64), max_abs exact; long multi-tensor lists (several
// launches), NaN propagation, and bit-identical results run to run.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "test_util.h"

namespace stoker::ops {
namespace {

using test::gpu;

constexpr DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};
constexpr Reduction kReductions[] = {Reduction::sum, Reduction::max_abs, Reduction::l2_norm};

const char* name_of(Reduction r) {
  return r == Reduction::sum ? "sum" : r == Reduction::max_abs ? "max_abs" : "l2_norm";
}

// Sum of |x| over the list in double: the scale a sum's rounding error is relative to.
double abs_sum(const std::vector<Tensor>& xs) {
  double s = 0;
  for (const Tensor& x : xs)
    for (float v : x.to_floats()) s += std::fabs(static_cast<double>(v));
  return s;
}

// Reduces host list `xs` on the CPU and a device copy on the GPU and compares.
void compare(const std::vector<Tensor>& xs, const std::string& what, int64_t offset = 0) {
  std::vector<Tensor> dev;
  dev.reserve(xs.size());
  for (const Tensor& x : xs) dev.push_back(test::copy_at_offset(x, gpu(), offset));
  const double scale = abs_sum(xs);
  for (Reduction r : kReductions) {
    const Tensor h = reduce(std::span<const Tensor>(xs), r);
    const Tensor g = reduce(std::span<const Tensor>(dev), r);
    EXPECT_EQ(g.device(), gpu());
    EXPECT_EQ(g.dtype(), DType::f32);
    EXPECT_EQ(g.rank(), 0);
    const double hv = h.item(), gv = g.item();
    switch (r) {
      case Reduction::sum:
        EXPECT_NEAR(gv, hv, 1e-5 * scale + 1e-30) << what << " sum";
        break;
      case Reduction::max_abs:
        EXPECT_EQ(gv, hv) << what << " max_abs";
        break;
      case Reduction::l2_norm:
        EXPECT_NEAR(gv, hv, 1e-5 * hv + 1e-30) << what << " l2_norm";
        break;
    }
  }
}

TEST(ReduceGpuTest, SingleTensorEveryDtypeAndSize) {
  STOKER_REQUIRE_GPU();
  uint64_t seed = 1;
  for (DType d : kFloatTypes) {
    for (int64_t n :
         {int64_t{1}, int64_t{7}, int64_t{1023}, int64_t{4097}, int64_t{(1 << 20) + 3}}) {
      for (int64_t offset : {0, 1}) {
        compare({test::random_normal_tensor({n}, d, seed++, 0.5f, 2.0f)},
                std::string(dtype_name(d)) + " n " + std::to_string(n) + " offset " +
                    std::to_string(offset),
                offset);
      }
    }
  }
}

TEST(ReduceGpuTest, LargeTensorUsesEveryBlockSeveralTimes) {
  STOKER_REQUIRE_GPU();
  // More chunks than the kernel has blocks: each block folds several chunks.
  const int64_t n = (1 << 23) + (1 << 20) + 7;
  compare({test::random_normal_tensor({n}, DType::f32, 77, 0.1f, 1.0f)}, "9.4M f32");
}

std::vector<Tensor> random_list(int count, int max_size, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<Tensor> xs;
  xs.reserve(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    const DType d = kFloatTypes[gen() % 3];
    const int64_t n = static_cast<int64_t>(gen() % static_cast<uint32_t>(max_size + 1));
    xs.push_back(test::random_normal_tensor({n}, d, seed * 100000u + static_cast<uint32_t>(i), 0.0f,
                                            1.0f + static_cast<float>(i % 5)));
  }
  return xs;
}

TEST(ReduceGpuTest, MultiTensorMixedDtypes) {
  STOKER_REQUIRE_GPU();
  compare(random_list(300, 5000, 1), "300 tensors");
  compare(random_list(300, 5000, 2), "300 tensors, misaligned", 1);
  // Lists longer than one launch holds (several parameter groups).
  compare(random_list(2100, 300, 3), "2100 tensors");
  compare(random_list(4500, 64, 4), "4500 tensors");
}

TEST(ReduceGpuTest, EmptyTensorsInTheList) {
  STOKER_REQUIRE_GPU();
  std::vector<Tensor> xs = {
      Tensor::empty({0}, DType::f16), test::random_normal_tensor({1000}, DType::f32, 1),
      Tensor::empty({0, 3}, DType::f32), test::random_normal_tensor({7}, DType::bf16, 2),
      Tensor::empty({0}, DType::bf16)};
  compare(xs, "with empties");
  const std::vector<Tensor> only_empty = {Tensor::empty({0}, DType::f32, gpu()),
                                          Tensor::empty({0}, DType::f16, gpu())};
  for (Reduction r : kReductions) {
    EXPECT_EQ(reduce(std::span<const Tensor>(only_empty), r).item(), 0.0) << name_of(r);
  }
}

TEST(ReduceGpuTest, NanPropagates) {
  STOKER_REQUIRE_GPU();
  for (DType d : kFloatTypes) {
    for (int64_t pos :
         {int64_t{0}, int64_t{5}, int64_t{8191}, int64_t{500000}, int64_t{(1 << 20) + 2}}) {
      for (int64_t offset : {0, 1}) {
        Tensor x = test::random_normal_tensor({(1 << 20) + 3}, DType::f32, 5);
        x.data<float>()[pos] = test::kNaN;
        if (d != DType::f32) {
          const Tensor h = Tensor::empty({(1 << 20) + 3}, d);
          cast(h, x);
          x = h;
        }
        const Tensor dx = test::copy_at_offset(x, gpu(), offset);
        for (Reduction r : kReductions) {
          EXPECT_TRUE(std::isnan(reduce(dx, r).item()))
              << name_of(r) << " " << dtype_name(d) << " pos " << pos << " offset " << offset;
        }
      }
    }
  }
  // NaN in one tensor of a long list (a later launch group), negative NaN too.
  std::vector<Tensor> xs = random_list(2500, 100, 9);
  xs[2300] = Tensor::from_floats({1.0f, -test::kNaN, 2.0f}, {3}, DType::bf16);
  std::vector<Tensor> dev;
  for (const Tensor& x : xs) dev.push_back(x.to(gpu()));
  for (Reduction r : kReductions) {
    EXPECT_TRUE(std::isnan(reduce(std::span<const Tensor>(dev), r).item())) << name_of(r);
  }
}

TEST(ReduceGpuTest, InfinityMatchesCpu) {
  STOKER_REQUIRE_GPU();
  for (DType d : kFloatTypes) {
    const Tensor x = Tensor::from_floats({1.0f, -test::kInf, 2.0f, 0.5f, -3.0f}, {5}, d);
    const Tensor dx = x.to(gpu());
    EXPECT_EQ(max_abs(dx).item(), std::numeric_limits<double>::infinity()) << dtype_name(d);
    EXPECT_EQ(l2_norm(dx).item(), std::numeric_limits<double>::infinity()) << dtype_name(d);
    EXPECT_EQ(sum(dx).item(), -std::numeric_limits<double>::infinity()) << dtype_name(d);
  }
}

TEST(ReduceGpuTest, RepeatedReduceIsBitIdentical) {
  STOKER_REQUIRE_GPU();
  const std::vector<Tensor> host = random_list(2100, 3000, 11);
  std::vector<Tensor> dev;
  for (const Tensor& x : host) dev.push_back(x.to(gpu()));
  const Tensor big = test::random_normal_tensor({(1 << 23) + 5}, DType::f32, 12).to(gpu());
  for (Reduction r : kReductions) {
    const Tensor first = reduce(std::span<const Tensor>(dev), r);
    const Tensor first_big = reduce(big, r);
    for (int i = 0; i < 5; ++i) {
      EXPECT_TRUE(test::bit_identical(reduce(std::span<const Tensor>(dev), r), first))
          << name_of(r);
      EXPECT_TRUE(test::bit_identical(reduce(big, r), first_big)) << name_of(r);
    }
  }
}

TEST(ReduceGpuTest, MixedDevicesThrowNamingBoth) {
  STOKER_REQUIRE_GPU();
  const std::vector<Tensor> xs = {Tensor::empty({4}, DType::f32, gpu()),
                                  Tensor::empty({3}, DType::f16)};
  EXPECT_TRUE(test::throws_error_with([&] { sum(std::span<const Tensor>(xs)); },
                                      {"ops::sum", "xs[0] is f32[4] on cuda:0",
                                       "xs[1] is f16[3] on cpu", "expected both on one device"}));
}

}  // namespace
}  // namespace stoker::ops
