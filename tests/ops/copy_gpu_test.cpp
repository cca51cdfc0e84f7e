// fill, copy and cast on the GPU against the CPU reference: fills and casts must be
// BIT-identical (both backends round with core/half.h), on aligned and misaligned views, and
// copies move bytes exactly between host, pinned host and device memory.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "test_util.h"

namespace stoker::ops {
namespace {

using test::bit_identical;
using test::gpu;

constexpr DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};
constexpr DType kAllTypes[] = {DType::f32, DType::f16, DType::bf16,
                               DType::i32, DType::i64, DType::u8};
constexpr int64_t kSizes[] = {1, 7, 1023, 4097, (1 << 20) + 3};

TEST(CopyGpuTest, FillIsBitIdenticalToCpu) {
  STOKER_REQUIRE_GPU();
  for (DType d : kAllTypes) {
    const bool fp = core::is_float(d);
    for (double value :
         {fp ? -0.1 : -7.0, fp ? 65519.0 : 200.0, 0.0, fp ? -0.0 : 1.0, fp ? 1e-30 : 3.0}) {
      if (d == DType::u8 && value < 0) continue;
      for (int64_t n : kSizes) {
        for (int64_t offset : {0, 1}) {
          const Tensor host = Tensor::empty({n}, d);
          const Tensor dev = test::empty_at_offset(n, d, gpu(), offset);
          // Poison both with a byte pattern that is no valid result.
          std::memset(host.data(), 0xa5, host.nbytes());
          fill(dev, fp ? std::nan("") : 91.0);
          fill(host, value);
          fill(dev, value);
          ASSERT_TRUE(bit_identical(dev, host))
              << dtype_name(d) << " value " << value << " n " << n << " offset " << offset;
        }
      }
    }
  }
  // Special values on float tensors.
  for (DType d : kFloatTypes) {
    for (double value : {std::numeric_limits<double>::infinity(), std::nan(""), 1e6}) {
      const Tensor host = Tensor::empty({4097}, d);
      const Tensor dev = Tensor::empty({4097}, d, gpu());
      fill(host, value);
      fill(dev, value);
      EXPECT_TRUE(bit_identical(dev, host)) << dtype_name(d) << " " << value;
    }
  }
}

TEST(CopyGpuTest, FillWritesOnlyTheSlice) {
  STOKER_REQUIRE_GPU();
  const Tensor dev = test::poisoned({9, 5}, DType::f16, gpu());
  fill(dev.slice(3, 7), 1.5);
  const std::vector<float> v = dev.to_floats();
  for (size_t i = 0; i < v.size(); ++i) {
    if (i >= 15 && i < 35) {
      EXPECT_EQ(v[i], 1.5f) << i;
    } else {
      EXPECT_TRUE(std::isnan(v[i])) << i;
    }
  }
}

// Random values plus specials every conversion must keep.
Tensor cast_source(int64_t n, DType d, uint64_t seed) {
  Tensor t = Tensor::empty({n}, DType::f32);
  random_normal(t, 0.0f, 300.0f, seed, 0);
  float* p = t.data<float>();
  const float specials[] = {test::kNaN, test::kInf, -test::kInf, -0.0f,  1e5f,   -70000.0f,
                            65519.0f,   65520.0f,   3e-6f,       -1e-7f, 1e-39f, 3e38f};
  for (size_t i = 0; i < std::size(specials) && static_cast<int64_t>(i * 97) < n; ++i)
    p[i * 97] = specials[i];
  if (d == DType::f32) return t;
  Tensor h = Tensor::empty({n}, d);
  cast(h, t);
  return h;
}

TEST(CopyGpuTest, CastIsBitIdenticalToCpu) {
  STOKER_REQUIRE_GPU();
  uint64_t seed = 1;
  for (DType from : kFloatTypes) {
    for (DType to : kFloatTypes) {
      for (int64_t n : kSizes) {
        for (int64_t offset : {0, 1}) {
          const Tensor src = cast_source(n, from, seed++);
          const Tensor host_out = test::poisoned({n}, to);
          cast(host_out, src);
          const Tensor dev_src = test::copy_at_offset(src, gpu(), offset);
          const Tensor dev_out = test::empty_at_offset(n, to, gpu(), (offset + 1) % 2);
          test::poison(dev_out);
          cast(dev_out, dev_src);
          ASSERT_TRUE(bit_identical(dev_out, host_out))
              << dtype_name(from) << " -> " << dtype_name(to) << " n " << n << " offset " << offset;
        }
      }
    }
  }
}

TEST(CopyGpuTest, CopyRoundTripsEveryDtype) {
  STOKER_REQUIRE_GPU();
  for (DType d : kAllTypes) {
    for (int64_t n : {int64_t{1}, int64_t{4097}, int64_t{(1 << 20) + 3}}) {
      const Tensor host = Tensor::empty({n}, d);
      auto* bytes = static_cast<uint8_t*>(host.data());
      for (size_t i = 0; i < host.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(i * 131 + 7);
      const Tensor dev_typed = Tensor::empty({n}, d, gpu());
      copy(dev_typed, host);  // host -> device
      const Tensor dev2 = test::empty_at_offset(n, d, gpu(), 1);
      copy(dev2, dev_typed);  // device -> device, misaligned
      const Tensor back = Tensor::empty({n}, d);
      std::memset(back.data(), 0, back.nbytes());
      copy(back, dev2);  // device -> host
      EXPECT_EQ(test::raw_bytes(back), test::raw_bytes(host)) << dtype_name(d) << " n " << n;
    }
  }
}

TEST(CopyGpuTest, PinnedCopiesAreAsynchronousAndExact) {
  STOKER_REQUIRE_GPU();
  const int64_t n = (1 << 20) + 3;
  const Tensor src = Tensor::empty_pinned({n}, DType::f32);
  random_normal(src, 0.0f, 1.0f, 5, 0);
  const Tensor dev = test::poisoned({n}, DType::f32, gpu());
  const Tensor dst = Tensor::empty_pinned({n}, DType::f32);
  fill(dst, std::nan(""));
  const uint64_t syncs = core::host_sync_count();
  copy(dev, src);
  copy(dst, dev);
  EXPECT_EQ(core::host_sync_count(), syncs) << "pinned copies do not wait for the device";
  core::current_stream(gpu()).synchronize();
  EXPECT_EQ(core::host_sync_count(), syncs + 1);
  EXPECT_TRUE(bit_identical(dst, src));
}

TEST(CopyGpuTest, CopyAndCastErrorsNameDevices) {
  STOKER_REQUIRE_GPU();
  const Tensor dev = Tensor::empty({4}, DType::f32, gpu());
  const Tensor host16 = Tensor::empty({4}, DType::f16);
  EXPECT_TRUE(test::throws_error_with(
      [&] { cast(dev, host16); }, {"ops::cast", "dst is f32[4] on cuda:0", "src is f16[4] on cpu",
                                   "expected both on one device"}));
  EXPECT_TRUE(test::throws_error_with(
      [&] { copy(dev, host16); },
      {"ops::copy", "f32[4] on cuda:0", "f16[4] on cpu", "expected equal dtypes"}));
  EXPECT_TRUE(test::throws_error_with([&] { copy(dev, Tensor::empty({5}, DType::f32)); },
                                      {"ops::copy", "dst is f32[4] on cuda:0",
                                       "src is f32[5] on cpu", "expected equal element counts"}));
}

}  // namespace
}  // namespace stoker::ops
