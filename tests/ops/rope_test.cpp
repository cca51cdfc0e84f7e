// Rotary position embeddings on the CPU (ops/attention.h: rope_inverse_frequencies,
// rope_qkv_forward, rope_qkv_backward):
// - the inverse frequencies bit for bit against transformers' (tests/ops/llama_reference.txt,
//   written by tests/ops/llama_reference.py with transformers' LlamaRotaryEmbedding), and
//   against Llama 3's formula evaluated in double here;
// - a grouped-query qkv rotated and its gradient against transformers' apply_rotary_pos_emb and
//   autograd (the same fixture) in f32 and bf16;
// - the rotation against a plain rotate-half loop in double (H 8, KV 2, D 128), the value heads
//   untouched, the backward as the inverse rotation and as the gradient (finite differences);
// - bad inputs refused with the op's name.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numbers>
#include <string>
#include <vector>

#include "llama_reference.h"
#include "stoker/ops/attention.h"
#include "test_util.h"

namespace stoker::ops {
namespace {

using test::bit_identical;
using test::throws_error_with;

std::map<std::string, std::vector<float>> load_reference() { return test::load_llama_reference(); }

TEST(RopeTest, InverseFrequenciesEqualTransformers) {
  const auto ref = load_reference();
  ASSERT_FALSE(ref.empty()) << "tests/ops/llama_reference.txt missing";
  RopeOptions llama32{.head_dim = 64, .llama3_scaling = true, .factor = 32.0};
  RopeOptions llama31{.head_dim = 128, .llama3_scaling = true, .factor = 8.0};
  RopeOptions plain128{.head_dim = 128};
  RopeOptions theta1e4{.head_dim = 64, .theta = 10000.0};
  const std::pair<const char*, RopeOptions> cases[] = {{"inv_freq.d64_llama32", llama32},
                                                       {"inv_freq.d128_llama31", llama31},
                                                       {"inv_freq.d128_default", plain128},
                                                       {"inv_freq.d64_theta1e4", theta1e4}};
  for (const auto& [name, o] : cases) {
    const std::vector<float> got = rope_inverse_frequencies(o);
    const std::vector<float>& want = ref.at(name);
    ASSERT_EQ(got.size(), want.size()) << name;
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(core::float_bits(got[i]), core::float_bits(want[i]))
          << name << "[" << i << "]: " << got[i] << " vs transformers' " << want[i];
  }
}

TEST(RopeTest, InverseFrequenciesFollowLlama3Formula) {
  // Llama 3's published scaling in double: wavelengths below 8192 / 4 unchanged, above 8192 / 1
  // divided by the factor, in between interpolated with s = (8192 / wavelen - 1) / (4 - 1).
  for (const double factor : {8.0, 32.0}) {
    for (const int64_t d : {64, 128}) {
      const std::vector<float> got = rope_inverse_frequencies(
          {.head_dim = d, .theta = 500000.0, .llama3_scaling = true, .factor = factor});
      ASSERT_EQ(static_cast<int64_t>(got.size()), d / 2);
      int bands[3] = {0, 0, 0};
      for (int64_t i = 0; i < d / 2; ++i) {
        const double f = 1.0 / std::pow(500000.0, 2.0 * static_cast<double>(i) / d);
        const double wavelen = 2.0 * std::numbers::pi / f;
        double want = f;
        if (wavelen > 8192.0) {
          want = f / factor;
          ++bands[2];
        } else if (wavelen >= 2048.0) {
          const double s = (8192.0 / wavelen - 1.0) / 3.0;
          want = (1.0 - s) * f / factor + s * f;
          ++bands[1];
        } else {
          ++bands[0];
        }
        EXPECT_NEAR(got[static_cast<size_t>(i)], want, 2e-6 * want)
            << d << " " << factor << " " << i;
      }
      EXPECT_GT(bands[0], 0);  // all three bands are exercised
      EXPECT_GT(bands[1], 0);
      EXPECT_GT(bands[2], 0);
    }
  }
}

// A CPU tensor of `dtype` holding `values` (rounded).
Tensor make(const std::vector<float>& values, const Shape& shape, DType dtype) {
  return Tensor::from_floats(values, shape, dtype);
}

TEST(RopeTest, RotationAndGradientEqualTransformers) {
  const auto ref = load_reference();
  ASSERT_FALSE(ref.empty());
  const int64_t h = 2, kv = 1, d = 64, t = 6, width = (h + 2 * kv) * d;
  const Tensor inv = Tensor::from_floats(
      rope_inverse_frequencies({.head_dim = d, .llama3_scaling = true, .factor = 32.0}), {d / 2},
      DType::f32);
  std::vector<int64_t> pos_values;
  for (float p : ref.at("positions")) pos_values.push_back(static_cast<int64_t>(p));
  const Tensor pos = Tensor::from_vector(pos_values, {t});
  for (DType dtype : {DType::f32, DType::bf16}) {
    const std::string tag = dtype == DType::f32 ? "f32" : "bf16";
    const Tensor qkv = make(ref.at("qkv.input"), {t, width}, dtype);
    const Tensor fwd = qkv.clone(), bwd = qkv.clone();  // the gradient flowing in is the input
    rope_qkv_forward(fwd, pos, inv, h, kv);
    rope_qkv_backward(bwd, pos, inv, h, kv);
    for (const auto& [got, name] : {std::pair{fwd, "forward"}, std::pair{bwd, "backward"}}) {
      const std::vector<float> g = got.to_floats(), w = ref.at("qkv." + tag + "." + name);
      ASSERT_EQ(g.size(), w.size());
      int64_t differ = 0;
      for (size_t i = 0; i < g.size(); ++i) {
        if (g[i] == w[i]) continue;
        ++differ;
        // cos/sin here come from double, transformers' from SLEEF's fp32 cosf/sinf (1 ulp): f32
        // differs in the last bits (52 of 1536 elements); in bf16 the rounded cos/sin, products
        // and sums are transformers' own: every element has its bits.
        const double tol = dtype == DType::f32 ? 1e-6 * (1.0 + std::fabs(w[i]))
                                               : std::ldexp(std::fabs(w[i]), -7) + 1e-6;
        EXPECT_NEAR(g[i], w[i], tol) << tag << " " << name << " element " << i;
      }
      if (dtype == DType::bf16) EXPECT_EQ(differ, 0) << name;  // measured: 0 of 1536
    }
  }
}

// Plain rotate-half in double: the reference for any shape.
std::vector<double> rotate_reference(const std::vector<float>& x, const std::vector<int64_t>& pos,
                                     const std::vector<float>& inv, int64_t rotated, int64_t width,
                                     int64_t d, double sign) {
  std::vector<double> out(x.begin(), x.end());
  for (size_t r = 0; r < pos.size(); ++r)
    for (int64_t hh = 0; hh < rotated; ++hh)
      for (int64_t i = 0; i < d / 2; ++i) {
        const double angle = static_cast<double>(static_cast<float>(pos[r]) * inv[i]);
        const size_t lo = r * width + hh * d + i, hi = lo + d / 2;
        const double c = std::cos(angle), s = sign * std::sin(angle);
        out[lo] = x[lo] * c - x[hi] * s;
        out[hi] = x[hi] * c + x[lo] * s;
      }
  return out;
}

TEST(RopeTest, GroupedQueryRotationMatchesRotateHalf) {
  const int64_t h = 8, kv = 2, d = 128, t = 5, width = (h + 2 * kv) * d;
  const std::vector<float> inv =
      rope_inverse_frequencies({.head_dim = d, .llama3_scaling = true, .factor = 8.0});
  const Tensor inv_t = Tensor::from_floats(inv, {d / 2}, DType::f32);
  const std::vector<int64_t> pos = {0, 7, 0, 3, 9000};  // two packed documents and a long one
  const Tensor x = test::random_tensor({1, t, width}, DType::f32, 5, -2.0f, 2.0f);
  const std::vector<float> xv = x.to_floats();
  for (const bool i64 : {false, true}) {
    const Tensor p =
        i64 ? Tensor::from_vector(pos, {1, t})
            : Tensor::from_vector(std::vector<int32_t>(pos.begin(), pos.end()), {1, t});
    const Tensor y = x.clone();
    rope_qkv_forward(y, p, inv_t, h, kv);
    const std::vector<float> yv = y.to_floats();
    const std::vector<double> want = rotate_reference(xv, pos, inv, h + kv, width, d, 1.0);
    for (size_t i = 0; i < yv.size(); ++i) {
      const bool value_head = static_cast<int64_t>(i % width) >= (h + kv) * d;
      if (value_head) {
        ASSERT_EQ(core::float_bits(yv[i]), core::float_bits(xv[i])) << "value head element " << i;
      } else {
        ASSERT_NEAR(yv[i], want[i], 2e-6) << (i64 ? "i64 " : "i32 ") << i;
      }
    }
    // The backward undoes the rotation (an orthogonal map: its transpose is its inverse).
    rope_qkv_backward(y, p, inv_t, h, kv);
    const std::vector<float> back = y.to_floats();
    for (size_t i = 0; i < back.size(); ++i) ASSERT_NEAR(back[i], xv[i], 4e-6) << i;
  }
}

TEST(RopeTest, BackwardIsTheGradient) {
  // L = sum(rope(x) * w): dL/dx by central differences equals rope_qkv_backward(w).
  const int64_t h = 2, kv = 1, d = 8, t = 3, width = (h + 2 * kv) * d;
  const Tensor inv = Tensor::from_floats(rope_inverse_frequencies({.head_dim = d, .theta = 100.0}),
                                         {d / 2}, DType::f32);
  const Tensor pos = Tensor::from_vector(std::vector<int32_t>{3, 0, 11}, {t});
  const Tensor x = test::random_tensor({t, width}, DType::f32, 7);
  const std::vector<float> w = test::random_floats(static_cast<size_t>(t * width), 8);
  auto loss = [&](const std::vector<float>& xv) {
    const Tensor y = Tensor::from_floats(xv, {t, width}, DType::f32);
    rope_qkv_forward(y, pos, inv, h, kv);
    double l = 0.0;
    const std::vector<float> yv = y.to_floats();
    for (size_t i = 0; i < yv.size(); ++i) l += static_cast<double>(yv[i]) * w[i];
    return l;
  };
  const Tensor g = Tensor::from_floats(w, {t, width}, DType::f32);
  rope_qkv_backward(g, pos, inv, h, kv);
  const std::vector<float> gv = g.to_floats();
  for (size_t i = 0; i < gv.size(); ++i) {
    std::vector<float> xp = x.to_floats(), xm = xp;
    xp[i] += 1e-2f;
    xm[i] -= 1e-2f;
    EXPECT_NEAR(gv[i], (loss(xp) - loss(xm)) / 2e-2, 1e-3) << i;
  }
}

TEST(RopeTest, BadInputsAreClearErrors) {
  const Tensor inv = Tensor::zeros({32}, DType::f32);
  const Tensor pos = Tensor::zeros({4}, DType::i32);
  const Tensor qkv = Tensor::zeros({4, 6 * 64}, DType::bf16);  // H 4, KV 1, D 64
  EXPECT_NO_THROW(rope_qkv_forward(qkv, pos, inv, 4, 1));
  EXPECT_TRUE(throws_error_with([&] { rope_qkv_forward(qkv, pos, inv, 4, 3); },
                                {"rope_qkv_forward", "num_kv_heads", "multiple"}));
  EXPECT_TRUE(throws_error_with([&] { rope_qkv_forward(qkv, pos, inv, 3, 1); },
                                {"rope_qkv_forward", "qkv", "even head dim"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        rope_qkv_forward(Tensor::zeros({4, 6 * 63}, DType::bf16), pos, inv, 4, 1);
      },
      {"rope_qkv_forward", "even head dim"}));
  EXPECT_TRUE(
      throws_error_with([&] { rope_qkv_forward(qkv, pos, Tensor::zeros({16}, DType::f32), 4, 1); },
                        {"rope_qkv_forward", "inv_freq", "f32[32]"}));
  EXPECT_TRUE(
      throws_error_with([&] { rope_qkv_backward(qkv, Tensor::zeros({3}, DType::i32), inv, 4, 1); },
                        {"rope_qkv_backward", "positions", "one position per token"}));
  EXPECT_TRUE(
      throws_error_with([&] { rope_qkv_forward(qkv, Tensor::zeros({4}, DType::f32), inv, 4, 1); },
                        {"rope_qkv_forward", "positions", "i32 or i64"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        rope_qkv_forward(Tensor::zeros({4, 384}, DType::i32), pos, inv, 4, 1);
      },
      {"rope_qkv_forward", "qkv"}));
  EXPECT_TRUE(throws_error_with([&] { rope_inverse_frequencies({.head_dim = 63}); },
                                {"rope_inverse_frequencies", "head_dim", "even"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        rope_inverse_frequencies(
            {.llama3_scaling = true, .low_freq_factor = 4.0, .high_freq_factor = 1.0});
      },
      {"rope_inverse_frequencies", "low_freq_factor"}));
}

}  // namespace
}  // namespace stoker::ops
