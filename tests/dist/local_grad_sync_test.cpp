// LocalGradSync: the single-process gradient sync, and the Trainer's default — a fit() with it
// equals the single-process step written out by hand (what the Trainer did before gradient
// syncs existed), bit for bit.
#include "dist/local_grad_sync.h"

#include <gtest/gtest.h>

#include "dist_test_util.h"
#include "stoker/data/tensor_batches.h"
#include "stoker/nn/loss.h"
#include "stoker/ops/elementwise.h"
#include "stoker/ops/layout.h"
#include "stoker/ops/optim.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/trainer.h"
#include "test_util.h"

namespace dist = stoker::dist;
namespace nn = stoker::nn;
namespace data = stoker::data;
namespace ops = stoker::ops;
using stoker::Tensor;
using stoker::test::Blobs;
using stoker::test::weights_of;
using stoker::train::Trainer;

TEST(LocalGradSyncTest, StepGradientsAreTheTrainableGradientsInRegistrationOrder) {
  auto m = stoker::test::make_mlp(3);
  const auto named = m->named_parameters();
  named[1].second->requires_grad = false;  // 0.bias frozen
  dist::LocalGradSync sync(*m);
  EXPECT_EQ(sync.describe(), "local");
  EXPECT_EQ(sync.communicator(), nullptr);
  EXPECT_EQ(sync.rank(), 0);
  EXPECT_EQ(sync.world_size(), 1);
  auto expect_trainable = [&] {
    const auto params = sync.parameters();
    const auto grads = sync.step_gradients();
    ASSERT_EQ(params.size(), grads.size());
    size_t i = 0;
    for (const auto& [name, p] : named) {
      if (!p->requires_grad) continue;
      ASSERT_LT(i, params.size());
      EXPECT_EQ(params[i].first, name);
      EXPECT_TRUE(grads[i].same_storage(p->grad())) << name;  // the gradient itself, no copy
      ++i;
    }
    EXPECT_EQ(i, params.size());
  };
  expect_trainable();
  EXPECT_EQ(sync.parameters().size(), named.size() - 1);
  // Read at every step: unfreezing between steps takes effect.
  named[1].second->requires_grad = true;
  expect_trainable();
  EXPECT_EQ(sync.parameters().size(), named.size());

  for (auto& [name, p] : named) ops::fill(p->grad(), 0.5);
  const auto grads = sync.step_gradients();
  EXPECT_EQ(sync.total_norm(grads).item(), ops::l2_norm(grads).item());
  // No communication: finish() leaves the gradients as they are and turns sync back on.
  sync.set_sync(false);
  sync.finish();
  EXPECT_TRUE(sync.sync());
  for (const Tensor& g : grads)
    for (float v : g.to_floats()) EXPECT_EQ(v, 0.5f);
  {
    auto scope = sync.no_sync();
    EXPECT_FALSE(sync.sync());
  }
  EXPECT_TRUE(sync.sync());
}

namespace {

// The single-process fit, written out: groups of k micro-batches per step (an epoch's last one
// may be shorter), each loss gradient scaled by 1/k, a short group rescaled by k / micro, the
// norm over the gradients of the parameters that require one, clipping, the optimizer step.
void fit_by_hand(nn::Module& m, stoker::optim::Optimizer& opt, data::BatchSource& src, int epochs,
                 int k, float clip) {
  nn::CrossEntropyLoss loss;
  m.set_training(true);
  for (int e = 0; e < epochs; ++e) {
    src.start_epoch(e);
    for (bool epoch_done = false; !epoch_done;) {
      int micro = 0;
      for (data::Batch b; micro < k; ++micro) {
        if (!src.next(b)) {
          epoch_done = true;
          break;
        }
        loss.forward(m.forward(b.input), b.target);
        m.backward(loss.backward(1.0f / static_cast<float>(k)));
      }
      if (micro == 0) break;
      std::vector<Tensor> grads;
      for (nn::Parameter* p : m.parameters())
        if (p->requires_grad) grads.push_back(p->grad());
      if (micro < k)
        for (const Tensor& g : grads) ops::scale(g, static_cast<float>(k) / micro);
      ops::clip_by_total_norm(grads, ops::l2_norm(grads), clip);
      opt.step();
      opt.zero_grad();
    }
  }
}

}  // namespace

TEST(LocalGradSyncTest, TrainerFitEqualsTheSingleProcessStepBitForBit) {
  const Blobs d = stoker::test::make_blobs(40, 61);  // 5 batches of 8: groups of 2, 2 and 1
  const int epochs = 2, k = 2;
  const float clip = 0.05f;  // small enough to act
  const data::TensorBatchesOptions batches{.batch_size = 8, .seed = 3};
  auto make_model = [] {
    auto m = stoker::test::make_mlp(11);
    m->named_parameters()[1].second->requires_grad = false;  // a frozen parameter too
    return m;
  };
  auto by_hand = make_model();
  {
    stoker::optim::SGD opt(by_hand->named_parameters(), {.lr = 0.2f, .momentum = 0.9f});
    data::TensorBatches src(d.x, d.y, batches);
    fit_by_hand(*by_hand, opt, src, epochs, k, clip);
  }
  // The Trainer's own LocalGradSync (grad_sync null) and one passed in.
  for (bool explicit_sync : {false, true}) {
    SCOPED_TRACE(explicit_sync ? "TrainerOptions::grad_sync = LocalGradSync" : "default");
    auto m = make_model();
    dist::LocalGradSync sync(*m);
    stoker::optim::SGD opt(m->named_parameters(), {.lr = 0.2f, .momentum = 0.9f});
    nn::CrossEntropyLoss loss;
    Trainer t(*m, loss, opt,
              {.grad_accum_steps = k,
               .clip_grad_norm = clip,
               .progress_bar = false,
               .quiet = true,
               .grad_sync = explicit_sync ? &sync : nullptr});
    data::TensorBatches src(d.x, d.y, batches);
    EXPECT_EQ(t.fit(src, epochs).steps, 6);
    EXPECT_EQ(weights_of(*m), weights_of(*by_hand));
  }
  EXPECT_NE(weights_of(*by_hand), weights_of(*make_model()));  // it trained
}
