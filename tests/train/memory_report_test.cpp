// Trainer::memory_report: the persistent categories (parameters, compute copies, gradients,
// optimizer state) add up to the allocator's current bytes, the first step's activation peak is
// measured, advice is ranked by what it saves, and a host out-of-memory error carries the
// report while a Trainer lives.

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "stoker/core/allocator.h"
#include "stoker/data/tensor_batches.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/linear.h"
#include "stoker/nn/loss.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/trainer.h"
#include "test_util.h"

using stoker::Device;
using stoker::DType;
using stoker::Tensor;
namespace nn = stoker::nn;
namespace train = stoker::train;
using stoker::optim::StateDType;

namespace {

constexpr int64_t kIn = 64, kHidden = 256, kOut = 8, kBatch = 32, kSamples = 128;

// The slack the categories may miss the allocator's count by, stated: the Trainer's device
// scalars (loss monitor, step loss, grad norm), the loss's saved prediction (kBatch x kOut f32)
// and allocator rounding: under 16 KiB for this model, which holds ~0.5 MiB.
constexpr int64_t kSlack = 16 * 1024;

struct Measured {
  size_t baseline;  // host bytes before the model existed (the dataset included)
  train::MemoryReport report;
};

Measured run(stoker::amp::Precision precision, StateDType state) {
  const Tensor x = stoker::test::random_tensor({kSamples, kIn}, DType::f32, 1);
  const Tensor y = stoker::test::random_tensor({kSamples, kOut}, DType::f32, 2);
  stoker::data::TensorBatches data(x, y, {.batch_size = kBatch});
  Measured r;
  r.baseline = stoker::core::memory_stats(Device::cpu()).current_bytes;
  nn::manual_seed(3);
  nn::Sequential model(nn::make<nn::Linear>(kIn, kHidden), nn::make<nn::ReLU>(),
                       nn::make<nn::Linear>(kHidden, kOut));
  nn::MSELoss loss;
  stoker::optim::AdamW opt(model.named_parameters(), {.state = {.dtype = state, .block = 256}});
  train::Trainer trainer(model, loss, opt,
                         {.precision = precision, .progress_bar = false, .quiet = true});
  trainer.fit(data, 1);
  r.report = trainer.memory_report();
  return r;
}

TEST(MemoryReportTest, CategoriesAddUpToTheAllocatorsCurrentBytes) {
  for (const auto precision : {stoker::amp::Precision::fp32, stoker::amp::Precision::bf16})
    for (const StateDType state : {StateDType::f32, StateDType::int8_blockwise}) {
      SCOPED_TRACE(testing::Message() << "precision " << static_cast<int>(precision) << " state "
                                      << static_cast<int>(state));
      const Measured r = run(precision, state);
      const train::MemoryReport& m = r.report;
      const size_t weights = (kIn * kHidden + kHidden + kHidden * kOut + kOut) * sizeof(float);
      EXPECT_EQ(m.parameters, weights);
      EXPECT_EQ(m.gradients, weights);
      EXPECT_EQ(m.compute_copies,
                precision == stoker::amp::Precision::bf16 ? weights / 2 : size_t{0});
      EXPECT_GT(m.optimizer_state, 0u);
      const int64_t rest = m.unattributed() - static_cast<int64_t>(r.baseline);
      EXPECT_GE(rest, 0) << "the categories count bytes the allocator does not hold";
      EXPECT_LE(rest, kSlack) << train::format_memory_report(m);
      // The activation peak: at least the hidden layer's output, and not absurdly more.
      const size_t hidden = kBatch * kHidden * (precision == stoker::amp::Precision::bf16 ? 2 : 4);
      EXPECT_GE(m.activations_peak, hidden);
      EXPECT_LE(m.activations_peak, 16 * hidden + weights);
      const std::string text = train::format_memory_report(m);
      for (const char* name : {"parameters", "gradients", "optimizer state", "activations (peak)",
                               "unattributed", "allocator: current"})
        EXPECT_NE(text.find(name), std::string::npos) << name << " missing from\n" << text;
    }
}

TEST(MemoryReportTest, AdviceIsRankedAndSkipsWhatIsOn) {
  train::MemoryReport r;
  r.activations_peak = 1000;
  r.optimizer_state = 8000;
  r.input_batch = 100;
  auto a = train::memory_advice(r, {});
  ASSERT_EQ(a.size(), 4u);
  for (size_t i = 1; i < a.size(); ++i) EXPECT_GE(a[i - 1].saves_bytes, a[i].saves_bytes);
  EXPECT_NE(a[0].action.find("8 bits"), std::string::npos) << a[0].action;
  // Large activations put checkpointing / smaller micro-batches first; what is on is not advised.
  r.activations_peak = 1 << 30;
  a = train::memory_advice(
      r, {.mixed_precision = true, .low_precision_optimizer_state = true, .grad_accum_steps = 2});
  ASSERT_EQ(a.size(), 2u);
  EXPECT_NE(a[0].action.find("micro-batch"), std::string::npos) << a[0].action;
  EXPECT_NE(a[0].action.find("grad_accum_steps = 4"), std::string::npos) << a[0].action;
  EXPECT_NE(a[1].action.find("checkpointing"), std::string::npos) << a[1].action;
}

// The allocator's out-of-memory hook: while a Trainer lives, the error carries its report and
// advice; afterwards it does not.
TEST(MemoryReportTest, OutOfMemoryErrorCarriesTheReportWhileATrainerLives) {
  auto huge = [] {
    try {
      Tensor t = Tensor::empty({int64_t{1} << 58}, DType::f32);  // 1 EiB
      return std::string("allocated");
    } catch (const stoker::OutOfMemoryError& e) {
      return std::string(e.what());
    }
  };
  {
    nn::Sequential model(nn::make<nn::Linear>(8, 8));
    nn::MSELoss loss;
    stoker::optim::AdamW opt(model.named_parameters());
    train::Trainer trainer(model, loss, opt, {.progress_bar = false, .quiet = true});
    const std::string msg = huge();
    EXPECT_NE(msg.find("optimizer state"), std::string::npos) << msg;
    EXPECT_NE(msg.find("ways to need less memory"), std::string::npos) << msg;
    EXPECT_NE(msg.find("8 bits"), std::string::npos) << msg;
  }
  const std::string after = huge();
  EXPECT_NE(after.find("host allocation"), std::string::npos) << after;
  EXPECT_EQ(after.find("optimizer state"), std::string::npos) << after;
}

}  // namespace
