// Test helper of tests/nn/rmsnorm_test.cpp and swiglu_test.cpp: a module's input and parameter
// gradients against central finite differences of L = sum(forward(x) * r), in f32 with L summed
// in double (eps 1e-2: rounding noise ~1e-5 in the quotient, truncation ~1e-4; the tolerance
// 5e-3 relative plus 1e-3 of the largest gradient leaves room for both, while a wrong term is an
// O(1) error).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "stoker/nn/module.h"
#include "test_util.h"

namespace stoker::test {

inline ::testing::AssertionResult gradients_agree(const std::vector<float>& analytic,
                                                  const std::vector<double>& numeric) {
  double scale = 0.0;
  for (double n : numeric) scale = std::max(scale, std::fabs(n));
  if (scale == 0.0 || analytic.size() != numeric.size())
    return ::testing::AssertionFailure() << "vacuous or mismatched check";
  for (size_t k = 0; k < numeric.size(); ++k) {
    const double a = analytic[k], n = numeric[k];
    const double tol = 5e-3 * std::max(std::fabs(a), std::fabs(n)) + 1e-3 * scale;
    if (!(std::fabs(a - n) <= tol))
      return ::testing::AssertionFailure()
             << "element " << k << ": backward " << a << ", finite difference " << n;
  }
  return ::testing::AssertionSuccess();
}

// Checks dx and every parameter gradient of `m` at the f32 host input x.
inline void check_gradients(nn::Module& m, const Tensor& x, uint32_t seed) {
  const Tensor y = m.forward(x);
  const std::vector<float> r = random_floats(static_cast<size_t>(y.numel()), seed);
  for (nn::Parameter* p : m.parameters()) p->zero_grad();
  const Tensor dx = m.backward(Tensor::from_floats(r, y.shape()));
  const auto loss = [&] {
    const std::vector<float> v = m.forward(x).to_floats();
    double s = 0.0;
    for (size_t i = 0; i < v.size(); ++i) s += static_cast<double>(v[i]) * r[i];
    return s;
  };
  const auto numeric = [&](const Tensor& t) {
    float* p = t.data<float>();
    std::vector<double> g(static_cast<size_t>(t.numel()));
    for (int64_t k = 0; k < t.numel(); ++k) {
      const float saved = p[k];
      p[k] = saved + 1e-2f;
      const double up = loss();
      p[k] = saved - 1e-2f;
      const double down = loss();
      p[k] = saved;
      g[static_cast<size_t>(k)] =
          (up - down) / (static_cast<double>(saved + 1e-2f) - (saved - 1e-2f));
    }
    return g;
  };
  std::vector<std::vector<float>> grads;
  for (const auto& [name, p] : m.named_parameters()) grads.push_back(p->grad().to_floats());
  EXPECT_TRUE(gradients_agree(dx.to_floats(), numeric(x))) << m.describe() << " dx";
  size_t i = 0;
  for (const auto& [name, p] : m.named_parameters()) {
    EXPECT_TRUE(gradients_agree(grads[i++], numeric(p->value()))) << m.describe() << " d" << name;
  }
}

}  // namespace stoker::test
