// The CPU optimizer loops (vectorized for AVX2 + FMA where the CPU has them, ops/cpu/optim.cpp)
// give the bits of a plain scalar loop of the same formulas with correctly rounded fmaf: the
// reference below is that loop, written out here (this file is compiled for the baseline x86-64,
// where std::fma is libm's correctly rounded fmaf). Sizes cover vector bodies, their scalar
// tails and several oneTBB chunks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "stoker/core/half.h"
#include "stoker/ops/elementwise.h"
#include "stoker/ops/layout.h"
#include "stoker/ops/optim.h"

using stoker::DType;
using stoker::Tensor;
namespace ops = stoker::ops;

namespace {

constexpr int64_t kSizes[] = {1, 7, 37, 1000, 100003};

Tensor random_tensor(int64_t n, uint64_t seed, float std = 1.0f) {
  Tensor t = Tensor::empty({n}, DType::f32);
  ops::random_normal(t, 0.0f, std, seed, 0);
  return t;
}

// |random|: a second moment is non-negative.
Tensor random_positive(int64_t n, uint64_t seed) {
  std::vector<float> v = random_tensor(n, seed).to_vector<float>();
  for (float& x : v) x = std::fabs(x);
  return Tensor::from_floats(v, {n});
}

std::vector<float> floats(const Tensor& t) { return t.to_vector<float>(); }

// The bf16 bits of a host tensor.
std::vector<uint16_t> bits16(const Tensor& t) {
  std::vector<uint16_t> out(static_cast<size_t>(t.numel()));
  std::memcpy(out.data(), t.data(), t.nbytes());
  return out;
}

void expect_bits_equal(const std::vector<float>& want, const std::vector<float>& got,
                       const char* what) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &want[i], 4);
    std::memcpy(&b, &got[i], 4);
    ASSERT_EQ(a, b) << what << " element " << i << ": " << want[i] << " vs " << got[i];
  }
}

// AdamW, the order of operations of the library's per-element update (PyTorch's formulas).
struct ScalarAdamW {
  float decay, omb1, beta2, omb2, step_size, bc2_sqrt, eps;
  ScalarAdamW(const ops::AdamWHyper& h) {
    const double t = static_cast<double>(h.step);
    decay = static_cast<float>(1.0 - static_cast<double>(h.lr) * h.weight_decay);
    omb1 = static_cast<float>(1.0 - h.beta1);
    beta2 = h.beta2;
    omb2 = static_cast<float>(1.0 - h.beta2);
    step_size = static_cast<float>(h.lr / (1.0 - std::pow(static_cast<double>(h.beta1), t)));
    bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(h.beta2), t)));
    eps = h.eps;
  }
  void update(float& p, float& m, float& v, float g) const {
    p = p * decay;
    m = std::fma(omb1, g - m, m);
    v = std::fma(omb2 * g, g, v * beta2);
    const float denom = std::sqrt(v) / bc2_sqrt + eps;
    p = std::fma(-step_size, m / denom, p);
  }
};

TEST(OptimCpuTest, AdamWF32StateEqualsScalarLoopBitForBit) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(testing::Message() << "n = " << n);
    Tensor p = random_tensor(n, 1), m = random_tensor(n, 2, 0.1f), v = random_positive(n, 3);
    std::vector<float> rp = floats(p), rm = floats(m), rv = floats(v);
    for (int64_t step = 1; step <= 3; ++step) {
      const Tensor g = random_tensor(n, 10 + step, step == 2 ? 1e-3f : 1.0f);
      const ops::AdamWHyper h{.lr = 3e-3f, .weight_decay = 0.1f, .step = step};
      ops::adamw_step({&p, 1}, {&g, 1}, {&m, 1}, {&v, 1}, h);
      const ScalarAdamW ref(h);
      const std::vector<float> rg = floats(g);
      for (int64_t i = 0; i < n; ++i) ref.update(rp[i], rm[i], rv[i], rg[i]);
    }
    expect_bits_equal(rp, floats(p), "param");
    expect_bits_equal(rm, floats(m), "exp_avg");
    expect_bits_equal(rv, floats(v), "exp_avg_sq");
  }
}

TEST(OptimCpuTest, AdamWBf16StateEqualsScalarLoopBitForBit) {
  using stoker::core::bf16_bits_to_float;
  using stoker::core::float_to_bf16_bits;
  for (int64_t n : kSizes) {
    SCOPED_TRACE(testing::Message() << "n = " << n);
    Tensor p = random_tensor(n, 4);
    ops::StateTensor m{.values = Tensor::empty({n}, DType::bf16)};
    ops::StateTensor v{.values = Tensor::empty({n}, DType::bf16)};
    ops::cast(m.values, random_tensor(n, 5, 0.1f));
    ops::cast(v.values, random_positive(n, 6));
    std::vector<float> rp = floats(p);
    std::vector<uint16_t> rm = bits16(m.values), rv = bits16(v.values);
    for (int64_t step = 1; step <= 3; ++step) {
      const Tensor g = random_tensor(n, 20 + step);
      const ops::AdamWHyper h{.lr = 1e-2f, .weight_decay = 0.01f, .step = step};
      ops::adamw_step({&p, 1}, {&g, 1}, {&m, 1}, {&v, 1}, h, ops::StateStorage{});
      const ScalarAdamW ref(h);
      const std::vector<float> rg = floats(g);
      for (int64_t i = 0; i < n; ++i) {
        float mf = bf16_bits_to_float(rm[i]), vf = bf16_bits_to_float(rv[i]);
        ref.update(rp[i], mf, vf, rg[i]);
        rm[i] = float_to_bf16_bits(mf);
        rv[i] = float_to_bf16_bits(vf);
      }
    }
    expect_bits_equal(rp, floats(p), "param");
    EXPECT_EQ(rm, bits16(m.values));
    EXPECT_EQ(rv, bits16(v.values));
  }
}

// SGD: g += wd p; buf = first ? g : momentum buf + (1 - dampening) g; g = nesterov ? g +
// momentum buf : buf; p -= lr g — each multiply-add one fmaf.
void scalar_sgd(float& p, float& buf, float g, const ops::SgdHyper& h) {
  if (h.weight_decay != 0.0f) g = std::fma(h.weight_decay, p, g);
  if (h.momentum != 0.0f) {
    const float omd = static_cast<float>(1.0 - h.dampening);
    buf = h.first_step ? g : std::fma(h.momentum, buf, omd * g);
    g = h.nesterov ? std::fma(h.momentum, buf, g) : buf;
  }
  p = std::fma(-h.lr, g, p);
}

TEST(OptimCpuTest, SgdEqualsScalarLoopBitForBit) {
  struct Case {
    float momentum, dampening, wd;
    bool nesterov, bf16;
  };
  for (const Case& c : {Case{0, 0, 1e-2f, false, false}, Case{0.9f, 0.1f, 1e-2f, false, false},
                        Case{0.9f, 0, 5e-4f, true, false}, Case{0.9f, 0, 5e-4f, true, true},
                        Case{0.9f, 0.1f, 0, false, true}}) {
    for (int64_t n : kSizes) {
      SCOPED_TRACE(testing::Message() << "n = " << n << " momentum " << c.momentum << " nesterov "
                                      << c.nesterov << " bf16 " << c.bf16);
      Tensor p = random_tensor(n, 7);
      Tensor buf = Tensor::zeros({n}, DType::f32);
      ops::StateTensor buf16{.values = Tensor::zeros({n}, DType::bf16)};
      std::vector<float> rp = floats(p), rb(n, 0.0f);
      for (int step = 0; step < 3; ++step) {
        const Tensor g = random_tensor(n, 30 + step);
        const ops::SgdHyper h{.lr = 0.05f,
                              .momentum = c.momentum,
                              .dampening = c.dampening,
                              .weight_decay = c.wd,
                              .nesterov = c.nesterov,
                              .first_step = step == 0};
        if (c.bf16)
          ops::sgd_step({&p, 1}, {&g, 1}, {&buf16, 1}, h, ops::StateStorage{});
        else if (c.momentum != 0.0f)
          ops::sgd_step({&p, 1}, {&g, 1}, {&buf, 1}, h);
        else
          ops::sgd_step({&p, 1}, {&g, 1}, std::span<const Tensor>{}, h);
        const std::vector<float> rg = floats(g);
        for (int64_t i = 0; i < n; ++i) {
          scalar_sgd(rp[i], rb[i], rg[i], h);
          if (c.bf16)
            rb[i] = stoker::core::bf16_bits_to_float(stoker::core::float_to_bf16_bits(rb[i]));
        }
      }
      expect_bits_equal(rp, floats(p), "param");
      if (c.momentum != 0.0f && !c.bf16) expect_bits_equal(rb, floats(buf), "momentum");
    }
  }
}

}  // namespace
