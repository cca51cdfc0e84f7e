// Low-precision optimizer state through a Trainer checkpoint (safetensors with u8 codes, f32
// scales, bf16 moments): 16 steps straight equal 8 steps + checkpoint + resume + 8 steps, bit
// for bit, for 8-bit and bf16 (stochastic rounding: its draws follow the restored step count).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "stoker/data/tensor_batches.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/linear.h"
#include "stoker/nn/loss.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/trainer.h"
#include "test_util.h"

namespace fs = std::filesystem;
using stoker::DType;
using stoker::Tensor;
namespace nn = stoker::nn;
using stoker::optim::StateDType;
using stoker::optim::StateFormat;

namespace {

TEST(OptimizerStateResumeTest, LowPrecisionStateResumesBitForBit) {
  const fs::path dir =
      fs::temp_directory_path() / ("stoker_state_resume_" + std::to_string(::getpid()));
  const Tensor x = stoker::test::random_tensor({96, 16}, DType::f32, 1);
  const Tensor y = stoker::test::random_tensor({96, 4}, DType::f32, 2);
  for (const StateFormat f :
       {StateFormat{.dtype = StateDType::int8_blockwise, .block = 256, .min_quantized_numel = 0},
        StateFormat{.dtype = StateDType::bf16, .stochastic_rounding = true, .seed = 5}}) {
    SCOPED_TRACE(static_cast<int>(f.dtype));
    fs::remove_all(dir);
    auto run = [&](int64_t stop_at, const fs::path& resume_from) {
      nn::manual_seed(7);
      nn::Sequential model(nn::make<nn::Linear>(16, 64), nn::make<nn::ReLU>(),
                           nn::make<nn::Linear>(64, 4));
      stoker::optim::AdamW opt(model.named_parameters(), {.lr = 1e-2f, .state = f});
      nn::MSELoss loss;
      stoker::train::Trainer t(
          model, loss, opt,
          {.progress_bar = false, .checkpoint_dir = dir, .max_steps = stop_at, .quiet = true});
      if (!resume_from.empty()) t.resume(resume_from);
      stoker::data::TensorBatches b(x, y, {.batch_size = 16, .seed = 3});  // 6 per epoch
      t.fit(b, 100);
      std::vector<std::vector<uint8_t>> out;
      for (auto* p : model.parameters()) out.push_back(stoker::test::raw_bytes(p->value()));
      for (const auto& [name, s] : opt.state()) out.push_back(stoker::test::raw_bytes(s));
      return out;
    };
    const auto straight = run(16, {});
    run(8, {});
    ASSERT_TRUE(fs::exists(dir / "last.safetensors"));
    const auto resumed = run(16, dir / "last.safetensors");
    ASSERT_EQ(straight.size(), resumed.size());
    for (size_t i = 0; i < straight.size(); ++i)
      EXPECT_EQ(straight[i], resumed[i]) << "tensor " << i;
  }
  fs::remove_all(dir);
}

}  // namespace
