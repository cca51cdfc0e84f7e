// nn::RMSNorm (stoker/nn/layernorm.h) on the CPU: Hugging Face's name and initialization, the
// gradients against finite differences, the module's outputs equal to the ops it wraps (the
// fused residual add against ops::add + forward and backward + ops::add, to the bit), weight
// gradients accumulating, the saved input given up and handed back, the output rebuilt, and a
// wrong width refused.
#include <gtest/gtest.h>

#include <string>

#include "gradcheck.h"
#include "stoker/nn/layernorm.h"
#include "stoker/ops/elementwise.h"
#include "stoker/ops/layernorm.h"
#include "test_util.h"

namespace stoker::nn {
namespace {

using test::bit_identical;

TEST(RMSNormModuleTest, NameInitAndGradients) {
  RMSNorm norm(12, 1e-5f);
  const auto named = norm.named_parameters();
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].first, "weight");
  for (float v : norm.weight().value().to_floats()) EXPECT_EQ(v, 1.0f);
  norm.weight().set_value(test::random_tensor({12}, DType::f32, 3, 0.5f, 1.5f));
  test::check_gradients(norm, test::random_tensor({2, 3, 12}, DType::f32, 4, -2.0f, 2.0f), 5);
}

TEST(RMSNormModuleTest, FusedResidualAddEqualsUnfused) {
  for (DType d : {DType::f32, DType::bf16}) {
    RMSNorm norm(64, 1e-5f);
    norm.weight().set_value(test::random_tensor({64}, DType::f32, 10, 0.5f, 1.5f));
    const Shape s{2, 5, 64};
    const Tensor x = test::random_tensor(s, d, 11, -2.0f, 2.0f);
    const Tensor res = test::random_tensor(s, d, 12, -2.0f, 2.0f);
    const Tensor dy = test::random_tensor(s, d, 13), din = test::random_tensor(s, d, 14);

    const Tensor sum = Tensor::empty(s, d);
    ops::add(sum, x, res);
    const Tensor y_want = norm.forward(sum);
    const Tensor dx = norm.backward(dy);
    const Tensor dsum_want = Tensor::empty(s, d);
    ops::add(dsum_want, dx, din);
    const std::vector<float> grad_want = norm.weight().grad().to_floats();

    const Tensor sum2 = x.clone();  // the sum written over x (in place)
    const Tensor y = norm.forward_add(sum2, res, sum2);
    EXPECT_TRUE(bit_identical(sum2, sum)) << dtype_name(d);
    EXPECT_TRUE(bit_identical(y, y_want)) << dtype_name(d);
    EXPECT_EQ(y.shape(), s);
    const Tensor dsum = norm.backward_add(dy, din);
    EXPECT_TRUE(bit_identical(dsum, dsum_want)) << dtype_name(d);
    // The weight gradient accumulated a second, identical contribution.
    const std::vector<float> g = norm.weight().grad().to_floats();
    for (size_t j = 0; j < g.size(); ++j) EXPECT_EQ(g[j], grad_want[j] + grad_want[j]) << j;
  }
}

TEST(RMSNormModuleTest, SelectiveRecomputation) {
  RMSNorm norm(32);
  const Tensor x = test::random_tensor({4, 32}, DType::bf16, 20);
  const Tensor dy = test::random_tensor({4, 32}, DType::bf16, 21);
  const Tensor y = norm.forward(x);
  EXPECT_EQ(norm.output_recompute(), Module::OutputRecompute::from_own_state);
  EXPECT_TRUE(bit_identical(norm.recompute_output(Tensor()), y));
  const Tensor dx_want = [&] {
    RMSNorm ref(32);
    ref.forward(x);
    return ref.backward(dy);
  }();
  ASSERT_TRUE(norm.release_saved_input());
  EXPECT_EQ(norm.output_recompute(), Module::OutputRecompute::from_input);
  EXPECT_TRUE(bit_identical(norm.recompute_output(x), y));
  norm.restore_saved_input(x.clone());
  EXPECT_TRUE(bit_identical(norm.backward(dy), dx_want));
}

TEST(RMSNormModuleTest, BadInputsAreClearErrors) {
  RMSNorm norm(16);
  EXPECT_TRUE(test::throws_error_with(
      [&] {
        norm.forward(Tensor::zeros({2, 15}, DType::f32));
      },
      {"RMSNorm(16", "16 features"}));
  EXPECT_TRUE(test::throws_error_with(
      [&] {
        norm.backward(Tensor::zeros({2, 16}, DType::f32));
      },
      {"RMSNorm(16", "before forward"}));
  EXPECT_TRUE(test::throws_error_with([] { RMSNorm bad(0); }, {"RMSNorm(0)", "positive"}));
}

}  // namespace
}  // namespace stoker::nn
