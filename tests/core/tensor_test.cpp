// Tensor on the host: construction, typed access, views (slice/reshape), copies, conversions to
// host values, and the errors bad input gets (core/tensor.h).
#include "stoker/core/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sstream>
#include <vector>

#include "test_util.h"

namespace stoker::core {
namespace {

using test::throws_error_with;

TEST(TensorTest, DefaultIsUndefined) {
  const Tensor t;
  EXPECT_FALSE(t.defined());
  EXPECT_EQ(t.str(), "undefined tensor");
  EXPECT_TRUE(throws_error_with([&] { t.data(); }, {"undefined tensor"}));
  EXPECT_TRUE(throws_error_with([&] { t.item(); }, {"undefined tensor"}));
  EXPECT_TRUE(throws_error_with([&] { t.to(Device::cpu()); }, {"undefined tensor"}));
}

TEST(TensorTest, EmptyHasShapeDtypeDeviceAndBytes) {
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8}) {
    const Tensor t = Tensor::empty({2, 3, 4}, d);
    EXPECT_TRUE(t.defined());
    EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));
    EXPECT_EQ(t.rank(), 3);
    EXPECT_EQ(t.numel(), 24);
    EXPECT_EQ(t.nbytes(), 24 * dtype_size(d));
    EXPECT_EQ(t.dtype(), d);
    EXPECT_EQ(t.device(), Device::cpu());
    EXPECT_FALSE(t.is_pinned());
    EXPECT_EQ(t.size(0), 2);
    EXPECT_EQ(t.size(2), 4);
    EXPECT_EQ(t.size(-1), 4);
    EXPECT_EQ(t.size(-3), 2);
    EXPECT_NE(t.data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u) << "host memory is 64-byte aligned";
  }
}

TEST(TensorTest, SizeOutOfRangeThrows) {
  const Tensor t = Tensor::empty({2, 3}, DType::f32);
  EXPECT_TRUE(throws_error_with([&] { t.size(2); }, {"size(2) out of range", "f32[2, 3] on cpu"}));
  EXPECT_TRUE(throws_error_with([&] { t.size(-3); }, {"size(-3) out of range"}));
}

TEST(TensorTest, EmptyRejectsNegativeExtents) {
  EXPECT_TRUE(throws_error_with(
      [] {
        Tensor::empty({-1, 3}, DType::f32);
      },
      {"Tensor::empty", "[-1, 3]", "negative"}));
}

TEST(TensorTest, EmptyPinnedRejectsNegativeExtents) {
  // Like Tensor::empty: a -1 left in a shape must not reach the allocator (numel -3 would become
  // a byte count near 2^64, wrap in the size-class rounding and corrupt the pinned counters).
  const size_t pinned_before = pinned_memory_stats().current_bytes;
  EXPECT_TRUE(throws_error_with(
      [] {
        Tensor::empty_pinned({-1, 3}, DType::f32);
      },
      {"[-1, 3]", "negative"}));
  EXPECT_EQ(pinned_memory_stats().current_bytes, pinned_before);
}

TEST(TensorTest, ZeroElementTensors) {
  const Tensor t = Tensor::empty({0, 5}, DType::f32);
  EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(t.nbytes(), 0u);
  EXPECT_TRUE(t.to_floats().empty());
  EXPECT_TRUE(t.clone().to_floats().empty());
  const Tensor scalar = Tensor::from_floats({2.5f}, {}, DType::f32);
  EXPECT_EQ(scalar.rank(), 0);
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(scalar.item(), 2.5);
}

TEST(TensorTest, ZerosAreZeroEvenInReusedMemory) {
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8}) {
    {
      // Dirty a block of the same size first so that a reused block is not zero by chance.
      Tensor dirty = Tensor::empty({257, 3}, d);
      std::memset(dirty.data(), 0xab, dirty.nbytes());
    }
    const Tensor z = Tensor::zeros({257, 3}, d);
    const std::vector<uint8_t> bytes = test::raw_bytes(z);
    ASSERT_EQ(bytes.size(), 257 * 3 * dtype_size(d));
    for (size_t i = 0; i < bytes.size(); ++i) ASSERT_EQ(bytes[i], 0) << dtype_name(d) << " " << i;
  }
}

TEST(TensorTest, FromFloatsRoundsToTheDtype) {
  const std::vector<float> v = test::random_floats(1000, 1, -300.0f, 300.0f);
  const Tensor f32 = Tensor::from_floats(v, {10, 100});
  EXPECT_EQ(f32.dtype(), DType::f32);
  EXPECT_EQ(f32.to_vector<float>(), v);

  const std::vector<Half> h = Tensor::from_floats(v, {1000}, DType::f16).to_vector<Half>();
  const std::vector<BFloat16> b = Tensor::from_floats(v, {1000}, DType::bf16).to_vector<BFloat16>();
  const std::vector<int32_t> i = Tensor::from_floats(v, {1000}, DType::i32).to_vector<int32_t>();
  const std::vector<int64_t> l = Tensor::from_floats(v, {1000}, DType::i64).to_vector<int64_t>();
  for (size_t k = 0; k < v.size(); ++k) {
    ASSERT_EQ(h[k].bits, float_to_half_bits(v[k])) << k;
    ASSERT_EQ(b[k].bits, float_to_bf16_bits(v[k])) << k;
    ASSERT_EQ(i[k], static_cast<int32_t>(std::trunc(v[k]))) << k;
    ASSERT_EQ(l[k], static_cast<int64_t>(std::trunc(v[k]))) << k;
  }
  const std::vector<uint8_t> u =
      Tensor::from_floats({0.0f, 1.9f, 200.5f, 255.0f}, {4}, DType::u8).to_vector<uint8_t>();
  EXPECT_EQ(u, (std::vector<uint8_t>{0, 1, 200, 255}));
}

TEST(TensorTest, FromFloatsCountMismatchThrows) {
  EXPECT_TRUE(throws_error_with(
      [] {
        Tensor::from_floats({1, 2, 3}, {2, 2});
      },
      {"Tensor::from_floats", "3 values", "[2, 2]", "4 elements"}));
}

TEST(TensorTest, FromVectorRoundTripsEveryType) {
  const std::vector<float> f = test::random_floats(37, 2);
  EXPECT_EQ(Tensor::from_vector(f, {37}).to_vector<float>(), f);
  std::vector<Half> h(37);
  std::vector<BFloat16> b(37);
  std::vector<int32_t> i(37);
  std::vector<int64_t> l(37);
  std::vector<uint8_t> u(37);
  for (size_t k = 0; k < 37; ++k) {
    h[k] = Half(f[k]);
    b[k] = BFloat16(f[k]);
    i[k] = static_cast<int32_t>(k * 1000003u) - 7;
    l[k] = (int64_t{1} << 40) + static_cast<int64_t>(k) * 977;
    u[k] = static_cast<uint8_t>(k * 7 + 3);
  }
  const Tensor th = Tensor::from_vector(h, {37});
  const Tensor tb = Tensor::from_vector(b, {37});
  EXPECT_EQ(th.dtype(), DType::f16);
  EXPECT_EQ(tb.dtype(), DType::bf16);
  const std::vector<Half> h2 = th.to_vector<Half>();
  const std::vector<BFloat16> b2 = tb.to_vector<BFloat16>();
  const std::vector<float> hf = th.to_floats(), bf = tb.to_floats();
  for (size_t k = 0; k < 37; ++k) {
    EXPECT_EQ(h2[k].bits, h[k].bits);
    EXPECT_EQ(b2[k].bits, b[k].bits);
    EXPECT_EQ(hf[k], half_bits_to_float(h[k].bits));
    EXPECT_EQ(bf[k], bf16_bits_to_float(b[k].bits));
  }
  EXPECT_EQ(Tensor::from_vector(i, {37}).to_vector<int32_t>(), i);
  EXPECT_EQ(Tensor::from_vector(l, {37}).to_vector<int64_t>(), l);
  EXPECT_EQ(Tensor::from_vector(u, {37}).to_vector<uint8_t>(), u);
  const std::vector<float> uf = Tensor::from_vector(u, {37}).to_floats();
  for (size_t k = 0; k < 37; ++k) EXPECT_EQ(uf[k], static_cast<float>(u[k]));
  EXPECT_TRUE(throws_error_with([&] { Tensor::from_vector(i, {36}); },
                                {"Tensor::from_vector", "37 values", "[36]"}));
}

TEST(TensorTest, TypedAccessChecksTheDtype) {
  const Tensor t = Tensor::from_floats({1, 2}, {2});
  EXPECT_EQ(t.data<float>()[1], 2.0f);
  EXPECT_TRUE(throws_error_with([&] { t.data<Half>(); }, {"Tensor::data<f16>()", "f32[2] on cpu"}));
  EXPECT_TRUE(throws_error_with([&] { t.data<int32_t>(); }, {"data<i32>", "f32[2]"}));
  EXPECT_TRUE(throws_error_with([&] { t.to_vector<int64_t>(); },
                                {"Tensor::to_vector<i64>", "f32[2] on cpu"}));
}

TEST(TensorTest, SliceIsAViewOfRows) {
  const std::vector<float> v = test::random_floats(12, 3);
  const Tensor t = Tensor::from_floats(v, {4, 3});
  const Tensor s = t.slice(1, 3);
  EXPECT_EQ(s.shape(), (Shape{2, 3}));
  EXPECT_TRUE(s.same_storage(t));
  EXPECT_EQ(s.to_floats(), std::vector<float>(v.begin() + 3, v.begin() + 9));
  // Writes through the view are seen by the parent.
  s.data<float>()[0] = 42.0f;
  EXPECT_EQ(t.to_floats()[3], 42.0f);
  // Slice of a slice, and an empty slice.
  const Tensor ss = s.slice(1, 2);
  EXPECT_EQ(ss.to_floats(), std::vector<float>(v.begin() + 6, v.begin() + 9));
  EXPECT_EQ(t.slice(4, 4).numel(), 0);
  EXPECT_EQ(t.slice(0, 4).to_floats()[11], v[11]);
  // Half rows are 2 bytes per element: the byte offset must account for it.
  const Tensor h = Tensor::from_floats(v, {6, 2}, DType::bf16);
  const std::vector<float> hs = h.slice(5, 6).to_floats();
  EXPECT_EQ(hs[0], bf16_bits_to_float(float_to_bf16_bits(v[10])));
  EXPECT_EQ(hs[1], bf16_bits_to_float(float_to_bf16_bits(v[11])));
}

TEST(TensorTest, SliceOutOfRangeThrows) {
  const Tensor t = Tensor::empty({4, 3}, DType::f32);
  for (auto [b, e] : {std::pair<int64_t, int64_t>{2, 5}, {-1, 2}, {3, 2}}) {
    EXPECT_TRUE(throws_error_with(
        [&] { t.slice(b, e); },
        {"Tensor::slice(" + std::to_string(b) + ", " + std::to_string(e) + ") out of range",
         "f32[4, 3] on cpu", "0 <= begin <= end <= 4"}));
  }
  const Tensor scalar = Tensor::from_floats({1.0f}, {});
  EXPECT_TRUE(throws_error_with([&] { scalar.slice(0, 1); }, {"rank >= 1", "f32[] on cpu"}));
}

TEST(TensorTest, ReshapeSharesStorageAndInfersMinusOne) {
  const std::vector<float> v = test::random_floats(24, 4);
  const Tensor t = Tensor::from_floats(v, {2, 3, 4});
  const Tensor r = t.reshape({6, 4});
  EXPECT_EQ(r.shape(), (Shape{6, 4}));
  EXPECT_TRUE(r.same_storage(t));
  EXPECT_EQ(r.to_floats(), v);
  EXPECT_EQ(t.reshape({-1}).shape(), (Shape{24}));
  EXPECT_EQ(t.reshape({4, -1}).shape(), (Shape{4, 6}));
  EXPECT_EQ(t.reshape({-1, 2, 3}).shape(), (Shape{4, 2, 3}));
  // A reshaped slice covers the slice's elements only.
  EXPECT_EQ(t.slice(1, 2).reshape({-1}).to_floats(), std::vector<float>(v.begin() + 12, v.end()));
}

TEST(TensorTest, ReshapeMismatchThrows) {
  const Tensor t = Tensor::empty({3, 4}, DType::f32);
  EXPECT_TRUE(throws_error_with(
      [&] {
        t.reshape({5, 2});
      },
      {"Tensor::reshape", "f32[3, 4] on cpu", "12 elements", "[5, 2]", "has 10"}));
  EXPECT_TRUE(throws_error_with([&] { t.reshape({5, -1}); }, {"cannot infer -1", "[5, -1]"}));
  EXPECT_TRUE(throws_error_with([&] { t.reshape({-1, -1}); }, {"only one extent may be -1"}));
}

TEST(TensorTest, ItemReturnsTheSingleValue) {
  EXPECT_EQ(Tensor::from_floats({-3.25f}, {1}).item(), -3.25);
  EXPECT_EQ(Tensor::from_floats({0.1f}, {1, 1}, DType::f16).item(),
            static_cast<double>(half_bits_to_float(float_to_half_bits(0.1f))));
  EXPECT_EQ(Tensor::from_floats({0.1f}, {1}, DType::bf16).item(),
            static_cast<double>(bf16_bits_to_float(float_to_bf16_bits(0.1f))));
  // Integers are exact, also beyond float's 24-bit mantissa.
  EXPECT_EQ(Tensor::from_vector(std::vector<int32_t>{123456789}, {1}).item(), 123456789.0);
  EXPECT_EQ(Tensor::from_vector(std::vector<int64_t>{(int64_t{1} << 52) + 1}, {}).item(),
            4503599627370497.0);
  EXPECT_EQ(Tensor::from_vector(std::vector<uint8_t>{250}, {1}).item(), 250.0);
  const uint64_t syncs = host_sync_count();
  EXPECT_EQ(Tensor::from_floats({7.0f}, {1}).item(), 7.0);
  EXPECT_EQ(host_sync_count(), syncs) << "item() on the host is not a device sync";
  EXPECT_TRUE(throws_error_with(
      [] {
        Tensor::from_floats({1, 2}, {2}).item();
      },
      {"exactly one element", "f32[2] on cpu"}));
}

TEST(TensorTest, CloneIsIndependent) {
  const std::vector<float> v = test::random_floats(10, 5);
  const Tensor t = Tensor::from_floats(v, {10});
  const Tensor c = t.clone();
  EXPECT_FALSE(c.same_storage(t));
  EXPECT_EQ(c.shape(), t.shape());
  EXPECT_EQ(c.dtype(), t.dtype());
  EXPECT_EQ(c.to_floats(), v);
  t.data<float>()[4] = 99.0f;
  c.data<float>()[5] = -99.0f;
  EXPECT_EQ(c.to_floats()[4], v[4]);
  EXPECT_EQ(t.to_floats()[5], v[5]);
  // A clone of a slice holds just the slice.
  const Tensor cs = t.slice(2, 5).clone();
  EXPECT_EQ(cs.numel(), 3);
  EXPECT_EQ(cs.storage()->bytes(), 3 * sizeof(float));
  EXPECT_EQ(cs.to_floats()[0], v[2]);
  // Copies of a Tensor share storage.
  const Tensor alias = t;
  EXPECT_TRUE(alias.same_storage(t));
}

TEST(TensorTest, ToCpuCopies) {
  const Tensor t = test::random_tensor({3, 5}, DType::bf16, 6);
  const Tensor c = t.to(Device::cpu());
  EXPECT_FALSE(c.same_storage(t));
  EXPECT_TRUE(test::bit_identical(c, t));
}

TEST(TensorTest, ToCudaWithoutAGpuThrows) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "machine has a GPU";
  const Tensor t = Tensor::from_floats({1, 2}, {2});
  EXPECT_TRUE(throws_error_with([&] { t.to(Device::cuda(0)); }, {"cuda:0"}));
  EXPECT_TRUE(throws_error_with([] { Tensor::empty({2}, DType::f32, Device::cuda(0)); },
                                {"cannot allocate on cuda:0"}));
}

TEST(TensorTest, StrAndStreaming) {
  EXPECT_EQ(Tensor::empty({2, 3}, DType::f32).str(), "f32[2, 3] on cpu");
  EXPECT_EQ(Tensor::empty({}, DType::i64).str(), "i64[] on cpu");
  std::ostringstream os;
  os << Tensor::empty({4}, DType::bf16);
  EXPECT_EQ(os.str(), "bf16[4] on cpu");
  EXPECT_EQ(Tensor::empty_pinned({4}, DType::u8).str(), "u8[4] on cpu (pinned)");
}

TEST(TensorTest, CopyBytesChecksSizes) {
  const Tensor a = Tensor::empty({4}, DType::f32);
  const Tensor b = Tensor::empty({3}, DType::f32);
  EXPECT_TRUE(throws_error_with([&] { detail::copy_bytes(a, b); },
                                {"byte sizes differ", "f32[3] on cpu", "f32[4] on cpu"}));
  // Same bytes, different dtypes: a raw copy.
  const Tensor src = test::random_tensor({4}, DType::f32, 8);
  const Tensor dst = Tensor::empty({8}, DType::f16);
  detail::copy_bytes(dst, src);
  EXPECT_EQ(test::raw_bytes(dst), test::raw_bytes(src));
}

}  // namespace
}  // namespace stoker::core
