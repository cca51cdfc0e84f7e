// Mixed precision through the Trainer on the CPU (same logic as the GPU: f16/bf16 storage, fp32
// math): fp32, bf16 and fp16 training of one model end close together, and fp16's loss scaler
// skips overflowed steps and backs off.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "stoker/data/tensor_batches.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/embedding.h"
#include "stoker/nn/linear.h"
#include "stoker/ops/elementwise.h"
#include "stoker/train/trainer.h"
#include "test_util.h"

namespace nn = stoker::nn;
using stoker::DType;
using stoker::Tensor;
using stoker::amp::Precision;
using stoker::train::Trainer;

namespace {

struct Data {
  Tensor x, y;
};
Data blobs(int64_t n) {
  Tensor x = Tensor::empty({n, 16}, DType::f32);
  stoker::ops::random_normal(x, 0.0f, 1.0f, 5, 0);
  std::vector<int64_t> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    y[i] = i % 4;
    x.data<float>()[i * 16 + y[i]] += 2.5f;
  }
  return {x, Tensor::from_vector(y, {n})};
}

std::unique_ptr<nn::Sequential> mlp() {
  nn::manual_seed(21);
  return std::make_unique<nn::Sequential>(nn::make<nn::Linear>(16, 64), nn::make<nn::GELU>(),
                                          nn::make<nn::Linear>(64, 64), nn::make<nn::ReLU>(),
                                          nn::make<nn::Linear>(64, 4));
}

struct Outcome {
  double train_loss, eval_loss, accuracy;
  std::vector<stoker::train::StepStats> log;
};

Outcome train(Precision p, stoker::amp::GradScalerOptions scaler = {}) {
  const Data d = blobs(800);
  auto model = mlp();
  stoker::optim::AdamW opt(model->named_parameters(), {.lr = 3e-3f});
  nn::CrossEntropyLoss loss;
  Trainer t(
      *model, loss, opt,
      {.precision = p, .scaler = scaler, .log_interval = 1, .progress_bar = false, .quiet = true});
  stoker::data::TensorBatches b(d.x, d.y, {.batch_size = 50, .seed = 1});
  const auto fit = t.fit(b, 4);
  stoker::data::TensorBatches eval(d.x, d.y, {.batch_size = 200, .shuffle = false});
  const auto e = t.evaluate(eval);
  double tail = 0;
  for (size_t i = fit.log.size() - 8; i < fit.log.size(); ++i) tail += fit.log[i].loss / 8;
  return {tail, e.loss, e.accuracy, fit.log};
}

TEST(PrecisionTest, Fp32Bf16Fp16EndClose) {
  const Outcome f32 = train(Precision::fp32), bf16 = train(Precision::bf16),
                f16 = train(Precision::fp16);
  // Stated tolerance: the mean loss of the last 8 steps within 5 % (bf16 keeps 8 mantissa bits,
  // f16 11) and held-out accuracy within 2 points of fp32.
  EXPECT_NEAR(bf16.train_loss, f32.train_loss, 0.05 * f32.train_loss);
  EXPECT_NEAR(f16.train_loss, f32.train_loss, 0.05 * f32.train_loss);
  EXPECT_NEAR(bf16.accuracy, f32.accuracy, 0.02);
  EXPECT_NEAR(f16.accuracy, f32.accuracy, 0.02);
  EXPECT_GT(f32.accuracy, 0.9);
  // The half runs really ran in half: their losses differ from fp32's in the low digits.
  EXPECT_NE(bf16.train_loss, f32.train_loss);
  EXPECT_NE(f16.train_loss, f32.train_loss);
  EXPECT_EQ(f32.log.back().loss_scale, -1.0);
  EXPECT_EQ(f16.log.back().loss_scale, 65536.0);
}

// Precision::fp8 runs the Linear layers' GEMMs in FP8 (on the CPU: the reference arithmetic):
// training ends close to fp32 (a looser band than bf16: 3 mantissa bits in, 2 in the gradients),
// and a model without Linear layers is refused rather than silently run in bf16.
TEST(PrecisionTest, Fp8EndsCloseAndNeedsLinearLayers) {
  const Outcome f32 = train(Precision::fp32), fp8 = train(Precision::fp8),
                bf16 = train(Precision::bf16);
  EXPECT_NEAR(fp8.train_loss, f32.train_loss, 0.10 * f32.train_loss);
  EXPECT_NEAR(fp8.accuracy, f32.accuracy, 0.03);
  EXPECT_NE(fp8.train_loss, bf16.train_loss);  // it did not run as bf16
  nn::Sequential no_linear(nn::make<nn::Embedding>(10, 4));
  stoker::optim::SGD opt(no_linear.named_parameters(), {.lr = 0.1f});
  nn::CrossEntropyLoss loss;
  EXPECT_TRUE(stoker::test::throws_error_with(
      [&] { Trainer t(no_linear, loss, opt, {.precision = Precision::fp8, .quiet = true}); },
      {"Precision::fp8", "nn::Linear", "bf16"}));
}

// A scale far too large makes the scaled f16 loss gradients overflow: those steps are skipped on
// the device and the scale halves until it fits, then training proceeds.
TEST(PrecisionTest, Fp16ScalerBacksOffFromOverflow) {
  const Outcome o = train(Precision::fp16, {.init_scale = 16777216.0f});  // 2^24
  ASSERT_GE(o.log.size(), 5u);
  EXPECT_EQ(o.log[0].loss_scale, 8388608.0);  // step 0 overflowed
  EXPECT_LT(o.log.back().loss_scale, 16777216.0);
  EXPECT_GT(o.accuracy, 0.9);
}

// Under bf16 an Embedding (integer input) emits bf16 activations, so the layers after it compute
// in half precision too; its gradient still accumulates in fp32 and training works.
TEST(PrecisionTest, EmbeddingEmitsTheComputeDtype) {
  nn::manual_seed(3);
  auto emb = nn::make<nn::Embedding>(10, 16);
  nn::Embedding* e = emb.get();
  nn::Sequential model(std::move(emb), nn::make<nn::Linear>(16, 10));
  stoker::optim::AdamW opt(model.named_parameters(), {.lr = 1e-2f});
  nn::CrossEntropyLoss loss;
  Trainer t(
      model, loss, opt,
      {.precision = Precision::bf16, .log_interval = 1, .progress_bar = false, .quiet = true});
  std::vector<int64_t> ids(64), labels(64);
  for (int i = 0; i < 64; ++i) ids[i] = labels[i] = i % 10;  // learn the identity
  const Tensor x = Tensor::from_vector(ids, {64}), y = Tensor::from_vector(labels, {64});
  EXPECT_EQ(e->forward(x).dtype(), DType::bf16);
  EXPECT_EQ(e->weight().grad().dtype(), DType::f32);
  stoker::data::TensorBatches b(x, y, {.batch_size = 16, .seed = 1});
  const auto fit = t.fit(b, 20);
  EXPECT_LT(fit.log.back().loss, 0.5 * fit.log.front().loss);
}

// fp16 loss scaling must scale the loss gradient before it is rounded to f16: here the unscaled
// gradient of mean(y^2) over 32768 outputs of ~1e-4 (~6e-9) is below f16's smallest subnormal
// (6e-8), so scaling after rounding would train on zeros. The fp16 step must match fp32's.
TEST(PrecisionTest, Fp16LossScaleIsAppliedBeforeRounding) {
  Tensor x = Tensor::empty({512, 64}, DType::f32);
  stoker::ops::random_normal(x, 0.0f, 0.01f, 31, 0);
  const Tensor zeros = Tensor::zeros({512, 64}, DType::f32);
  std::vector<std::vector<float>> deltas;
  for (const Precision p : {Precision::fp32, Precision::fp16}) {
    nn::Linear lin(64, 64, /*bias=*/false);
    Tensor w = Tensor::empty({64, 64}, DType::f32);
    stoker::ops::random_normal(w, 0.0f, 1e-3f, 32, 0);
    lin.weight().set_value(w);
    stoker::optim::SGD opt(lin.named_parameters(), {.lr = 1.0f});
    nn::MSELoss loss;
    Trainer t(lin, loss, opt, {.precision = p, .progress_bar = false, .quiet = true});
    t.train_step(std::vector<stoker::data::Batch>{{.input = x, .target = zeros, .size = 512}});
    const std::vector<float> before = w.to_floats(), after = lin.weight().value().to_floats();
    std::vector<float> d(before.size());
    for (size_t i = 0; i < d.size(); ++i) d[i] = after[i] - before[i];
    deltas.push_back(d);
  }
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < deltas[0].size(); ++i) {
    num += std::pow(deltas[1][i] - deltas[0][i], 2);
    den += std::pow(deltas[0][i], 2);
  }
  ASSERT_GT(den, 0.0);
  EXPECT_LT(std::sqrt(num / den), 0.02) << "the fp16 update differs from fp32's (flushed to zero?)";
}

}  // namespace
