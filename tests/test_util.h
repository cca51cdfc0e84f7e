// Helpers shared by the test suites.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/stoker.h"

// Skips the current test cleanly on machines without a usable GPU (CI).
#define STOKER_REQUIRE_GPU()                            \
  do {                                                  \
    if (::stoker::core::cuda_device_count() == 0) {     \
      GTEST_SKIP() << "no CUDA device on this machine"; \
    }                                                   \
  } while (0)

namespace stoker::test {

inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
inline constexpr float kInf = std::numeric_limits<float>::infinity();

// `n` floats uniform in [lo, hi) from std::mt19937 (independent of stoker's own RNG).
inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// A host tensor of `dtype` holding random values (rounded to dtype), never all zeros.
inline Tensor random_tensor(const Shape& shape, DType dtype, uint32_t seed, float lo = -1.0f,
                            float hi = 1.0f) {
  return Tensor::from_floats(random_floats(static_cast<size_t>(shape.numel()), seed, lo, hi), shape,
                             dtype);
}

// Writes NaN into every element of a float tensor, so elements an op forgets to write fail.
inline void poison(const Tensor& t) { ops::fill(t, std::numeric_limits<double>::quiet_NaN()); }

// A host tensor of `shape`/`dtype` filled with NaN.
inline Tensor poisoned(const Shape& shape, DType dtype, Device device = Device::cpu()) {
  Tensor t = Tensor::empty(shape, dtype, device);
  poison(t);
  return t;
}

// The tensor's bytes as they are stored (copied to the host first when needed).
inline std::vector<uint8_t> raw_bytes(const Tensor& t) {
  const Tensor h = t.device().is_cpu() ? t : t.to(Device::cpu());
  std::vector<uint8_t> out(h.nbytes());
  if (!out.empty()) std::memcpy(out.data(), h.data(), out.size());
  return out;
}

// Index of the first differing element (element size `elem`) of two byte vectors, or -1.
inline int64_t first_bit_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b,
                                    size_t elem) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); i += elem)
    if (std::memcmp(a.data() + i, b.data() + i, elem) != 0) return static_cast<int64_t>(i / elem);
  return -1;
}

// Passes when both tensors hold exactly the same bits (any devices).
inline ::testing::AssertionResult bit_identical(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.numel() != b.numel())
    return ::testing::AssertionFailure() << a.str() << " vs " << b.str();
  const int64_t i = first_bit_difference(raw_bytes(a), raw_bytes(b), dtype_size(a.dtype()));
  if (i < 0) return ::testing::AssertionSuccess();
  const std::vector<float> fa = a.to_floats(), fb = b.to_floats();
  return ::testing::AssertionFailure()
         << a.str() << " and " << b.str() << " first differ at element " << i << ": "
         << fa[static_cast<size_t>(i)] << " vs " << fb[static_cast<size_t>(i)];
}

// A ReLU's output zeroed some of t and not all of it: a comparison of fused against unfused
// ReLUs on it proves something (all or nothing zeroed would make the mask irrelevant).
inline ::testing::AssertionResult partly_zero(const Tensor& t) {
  int64_t zeros = 0;
  for (float v : t.to_floats()) zeros += v == 0.0f;
  if (zeros > 0 && zeros < t.numel()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << zeros << " of " << t.numel() << " values are 0 in "
                                       << t.str() << " (a vacuous comparison)";
}

// Like bit_identical, except that where one side holds NaN the other need only hold some NaN:
// NaN payload and sign bits produced by arithmetic are hardware-defined (x86 keeps the input's
// payload and makes Inf - Inf a negative NaN; CUDA returns the canonical 0x7fffffff).
inline ::testing::AssertionResult identical_up_to_nan_payload(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.numel() != b.numel())
    return ::testing::AssertionFailure() << a.str() << " vs " << b.str();
  const std::vector<uint8_t> ra = raw_bytes(a), rb = raw_bytes(b);
  const std::vector<float> fa = a.to_floats(), fb = b.to_floats();
  const size_t elem = dtype_size(a.dtype());
  for (size_t i = 0; i < fa.size(); ++i) {
    const bool same = (std::isnan(fa[i]) || std::isnan(fb[i]))
                          ? std::isnan(fa[i]) && std::isnan(fb[i])
                          : std::memcmp(ra.data() + i * elem, rb.data() + i * elem, elem) == 0;
    if (!same)
      return ::testing::AssertionFailure()
             << a.str() << " and " << b.str() << " first differ at element " << i << ": " << fa[i]
             << " vs " << fb[i];
  }
  return ::testing::AssertionSuccess();
}

// `v` after being stored in `dtype` (RNE for f16/bf16) and read back as float.
inline float round_to(DType dtype, float v) {
  switch (dtype) {
    case DType::f16:
      return core::half_bits_to_float(core::float_to_half_bits(v));
    case DType::bf16:
      return core::bf16_bits_to_float(core::float_to_bf16_bits(v));
    default:
      return v;
  }
}

// Passes when every element of `out` holds exactly round_to(out.dtype(), want[i]) (bit for bit;
// NaN only needs to be NaN). Reports the first mismatch and how many there are.
inline ::testing::AssertionResult matches_rounded(const Tensor& out,
                                                  const std::vector<float>& want) {
  const std::vector<float> got = out.to_floats();
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << out.str() << " vs " << want.size() << " values";
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const float w = round_to(out.dtype(), want[i]);
    const bool ok =
        std::isnan(w) ? std::isnan(got[i]) : core::float_bits(got[i]) == core::float_bits(w);
    if (!ok && bad++ == 0) first = static_cast<int64_t>(i);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  const size_t f = static_cast<size_t>(first);
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " elements of " << out.str() << " differ; first at "
         << first << ": got " << got[f] << ", want " << round_to(out.dtype(), want[f]);
}

// Distance in units in the last place between two finite floats of one sign convention.
inline int64_t ulp_distance(float a, float b) {
  auto key = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, 4);
    return i < 0 ? static_cast<int64_t>(std::numeric_limits<int32_t>::min()) - i
                 : static_cast<int64_t>(i);
  };
  const int64_t d = key(a) - key(b);
  return d < 0 ? -d : d;
}

// Passes when `f` throws stoker::Error whose what() contains every one of `parts`.
template <typename F>
::testing::AssertionResult throws_error_with(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const std::string& p : parts) {
      if (what.find(p) == std::string::npos)
        return ::testing::AssertionFailure()
               << "stoker::Error thrown, but its message lacks \"" << p << "\":\n  " << what;
    }
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-stoker exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

// max |a - b| <= atol + rtol * max |b| over the whole tensor, every a finite (a GPU result
// against a reference whose rounding differs: one tolerance per tensor, not per element).
inline void expect_max_abs_close(const std::vector<float>& a, const std::vector<float>& b,
                                 double rtol, const std::string& what, double atol = 1e-6) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double scale = 0, diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(std::isfinite(a[i])) << what << "[" << i << "]";
    scale = std::max(scale, static_cast<double>(std::abs(b[i])));
    diff = std::max(diff, static_cast<double>(std::abs(a[i] - b[i])));
  }
  EXPECT_LE(diff, atol + rtol * scale) << what << " (max |b| " << scale << ")";
}

// ---- GPU-test helpers ------------------------------------------------------------------------

inline Device gpu() { return Device::cuda(0); }

// Host tensor of `shape` holding ops::random_normal(mean, std) values from (seed, 0).
inline Tensor random_normal_tensor(const Shape& shape, DType dtype, uint64_t seed,
                                   float mean = 0.0f, float std = 1.0f) {
  Tensor t = Tensor::empty(shape, dtype);
  ops::random_normal(t, mean, std, seed, 0);
  return t;
}

// `n` elements on `device` starting `offset` elements into a fresh block: offset 0 is aligned,
// offset 1 misaligns every vector access (exercises head/tail code paths).
inline Tensor empty_at_offset(int64_t n, DType dtype, Device device, int64_t offset) {
  return Tensor::empty({n + offset}, dtype, device).slice(offset, n + offset);
}

// A copy of host tensor `t` on `device` starting `offset` elements into its block.
inline Tensor copy_at_offset(const Tensor& t, Device device, int64_t offset) {
  const Tensor d = empty_at_offset(t.numel(), t.dtype(), device, offset);
  ops::copy(d, t.reshape({-1}));
  return d.reshape(t.shape());
}

}  // namespace stoker::test
