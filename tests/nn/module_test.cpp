// nn::Module's registry (nn/module.h): a layer that only registers its parts — no traversal
// code — has them reach everything that walks a model:
// - names and order: own parts first, then each child under its name (tests/nn/registered_layer.h);
// - the optimizer (optim::SGD over named_parameters() changes every parameter), a Trainer
//   checkpoint ("model.<name>", "buffer.<name>", the generator's position, and resume), a
//   weight file, to(device) (every registered tensor on the CPU here; the GPU in
//   module_gpu_test.cpp), set_training and set_compute_dtype;
// - registration errors (empty and repeated names, a null child); modules neither copy nor move;
// - the names and order of a tree of every built-in layer, pinned to what the hand-written
//   traversals gave before the registry (parameters, buffers, generators, children).
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "nn/registered_layer.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/attention.h"
#include "stoker/nn/batchnorm2d.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/conv2d.h"
#include "stoker/nn/embedding.h"
#include "stoker/nn/layernorm.h"
#include "stoker/nn/linear.h"
#include "stoker/nn/loss.h"
#include "stoker/nn/pool.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/safetensors.h"
#include "stoker/train/trainer.h"
#include "test_util.h"

namespace stoker::test {
namespace {

namespace fs = std::filesystem;
using nn::make;

static_assert(!std::is_copy_constructible_v<nn::Module> &&
              !std::is_move_constructible_v<nn::Module>);
static_assert(!std::is_copy_constructible_v<ShiftedLinear> &&
              !std::is_move_constructible_v<ShiftedLinear> &&
              !std::is_move_assignable_v<ShiftedLinear>);

// Linear(3, 4) then the registering layer: Sequential{"0": Linear, "1": ShiftedLinear(4, 2)}.
std::unique_ptr<nn::Sequential> model_with_layer(uint64_t seed) {
  nn::manual_seed(seed);
  return std::make_unique<nn::Sequential>(make<nn::Linear>(3, 4), make<ShiftedLinear>(4, 2));
}

ShiftedLinear& layer_of(nn::Sequential& m) { return dynamic_cast<ShiftedLinear&>(m[1]); }

std::vector<std::string> parameter_names(nn::Module& m) {
  std::vector<std::string> out;
  m.visit_parameters("", [&](const std::string& n, nn::Parameter&) { out.push_back(n); });
  return out;
}
std::vector<std::string> buffer_names(nn::Module& m) {
  std::vector<std::string> out;
  m.visit_buffers("", [&](const std::string& n, Tensor&) { out.push_back(n); });
  return out;
}
std::vector<std::string> generator_names(nn::Module& m) {
  std::vector<std::string> out;
  m.visit_generators("", [&](const std::string& n, Generator&) { out.push_back(n); });
  return out;
}

// One forward/backward of MSE against a fixed target (gradients accumulate into every
// parameter) on `device`.
void forward_backward(nn::Module& m, Device device) {
  const Tensor x = random_tensor({5, 3}, DType::f32, 11).to(device);
  const Tensor target = random_tensor({5, 2}, DType::f32, 12).to(device);
  nn::MSELoss loss;
  loss.forward(m.forward(x), target);
  m.backward(loss.backward());
}

TEST(ModuleRegistry, PartsAreNamedOwnFirstThenChildren) {
  auto m = model_with_layer(1);
  EXPECT_EQ(parameter_names(*m), (std::vector<std::string>{"0.weight", "0.bias", "1.shift",
                                                           "1.inner.weight", "1.inner.bias"}));
  EXPECT_EQ(buffer_names(*m), (std::vector<std::string>{"1.marker"}));
  EXPECT_EQ(generator_names(*m), (std::vector<std::string>{"1.generator"}));
  // Under a prefix, and the layer alone.
  std::vector<std::string> prefixed;
  layer_of(*m).visit_parameters(
      "blk", [&](const std::string& n, nn::Parameter&) { prefixed.push_back(n); });
  EXPECT_EQ(prefixed,
            (std::vector<std::string>{"blk.shift", "blk.inner.weight", "blk.inner.bias"}));
  // The references are the layer's own members.
  const auto named = m->named_parameters();
  ASSERT_EQ(named.size(), 5u);
  EXPECT_EQ(named[2].second, &layer_of(*m).shift());
  EXPECT_EQ(named[3].second, &layer_of(*m).inner().weight());
  m->visit_buffers("",
                   [&](const std::string&, Tensor& t) { EXPECT_EQ(&t, &layer_of(*m).marker()); });
  m->visit_generators(
      "", [&](const std::string&, Generator& g) { EXPECT_EQ(&g, &layer_of(*m).generator()); });
  // parameters() is named_parameters()' order; the count covers the child's.
  const auto ps = m->parameters();
  ASSERT_EQ(ps.size(), named.size());
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(ps[i], named[i].second) << named[i].first;
  EXPECT_EQ(m->parameter_count(), 3 * 4 + 4 + 2 + 4 * 2 + 2);
  std::vector<nn::Module*> children;
  layer_of(*m).visit_children([&](nn::Module& c) { children.push_back(&c); });
  EXPECT_EQ(children, (std::vector<nn::Module*>{&layer_of(*m).inner()}));
}

TEST(ModuleRegistry, ParametersReachTheOptimizer) {
  auto m = model_with_layer(2);
  std::vector<std::vector<float>> before;
  for (auto& [n, p] : m->named_parameters()) before.push_back(p->value().to_floats());
  optim::SGD opt(m->named_parameters(), {.lr = 0.1f});
  ASSERT_EQ(opt.parameters().size(), 5u);
  opt.zero_grad();
  forward_backward(*m, Device::cpu());
  opt.step();
  const auto named = m->named_parameters();
  for (size_t i = 0; i < named.size(); ++i)
    EXPECT_NE(named[i].second->value().to_floats(), before[i]) << named[i].first << " unchanged";
}

TEST(ModuleRegistry, PartsReachTrainerCheckpointsAndWeightFiles) {
  const fs::path dir =
      fs::temp_directory_path() / ("stoker_module_registry_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto m = model_with_layer(3);
  layer_of(*m).generator().reserve(40);  // a position the resume must restore
  nn::MSELoss loss;
  optim::SGD opt(m->named_parameters(), {.lr = 0.1f});
  train::Trainer t(*m, loss, opt, {.progress_bar = false, .quiet = true});
  t.save_checkpoint(dir / "ckpt.safetensors", nullptr);
  {
    const train::SafetensorsReader r(dir / "ckpt.safetensors");
    const std::vector<std::string>& names = r.names();
    for (const char* want : {"model.0.weight", "model.0.bias", "model.1.shift",
                             "model.1.inner.weight", "model.1.inner.bias", "buffer.1.marker"})
      EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
    EXPECT_EQ(r.load("model.1.shift").to_floats(), std::vector<float>(2, 0.5f));
    EXPECT_EQ(r.load("buffer.1.marker").to_floats(), std::vector<float>(2, 7.0f));
    EXPECT_NE(r.metadata().at("stoker.generators").find("\"1.generator\""), std::string::npos)
        << r.metadata().at("stoker.generators");
  }
  // Resuming into a model built from another seed restores every registered part.
  auto other = model_with_layer(4);
  ops::fill(layer_of(*other).shift().value(), 0.0);
  ops::fill(layer_of(*other).marker(), 0.0);
  optim::SGD opt2(other->named_parameters(), {.lr = 0.1f});
  train::Trainer t2(*other, loss, opt2, {.progress_bar = false, .quiet = true});
  t2.resume(dir / "ckpt.safetensors");
  const auto a = m->named_parameters(), b = other->named_parameters();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(b[i].second->value().to_floats(), a[i].second->value().to_floats()) << a[i].first;
  EXPECT_EQ(layer_of(*other).marker().to_floats(), std::vector<float>(2, 7.0f));
  EXPECT_EQ(layer_of(*other).generator().seed(), 1234u);
  EXPECT_EQ(layer_of(*other).generator().offset(), layer_of(*m).generator().offset());
  // A weight file holds the same names without the checkpoint's kind prefix.
  train::save_weights(*m, dir / "weights.safetensors");
  {
    const train::SafetensorsReader r(dir / "weights.safetensors");
    const std::vector<std::string>& names = r.names();
    for (const char* want : {"1.shift", "1.inner.weight", "1.marker"})
      EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
  fs::remove_all(dir);
}

TEST(ModuleRegistry, ToAndModesReachEveryRegisteredPart) {
  auto m = model_with_layer(5);
  forward_backward(*m, Device::cpu());  // gradients exist
  m->to(Device::cpu());
  for (auto& [n, p] : m->named_parameters()) {
    EXPECT_EQ(p->value().device(), Device::cpu()) << n;
    EXPECT_EQ(p->grad().device(), Device::cpu()) << n;
  }
  m->visit_buffers(
      "", [](const std::string& n, Tensor& t) { EXPECT_EQ(t.device(), Device::cpu()) << n; });
  std::function<void(nn::Module&)> walk = [&](nn::Module& mod) {
    EXPECT_EQ(mod.device(), Device::cpu()) << mod.describe();
    EXPECT_FALSE(mod.training()) << mod.describe();
    mod.visit_children(walk);
  };
  m->set_training(false);
  walk(*m);
  EXPECT_FALSE(layer_of(*m).inner().training());
  forward_backward(*m, Device::cpu());  // still computes after the move
}

// A layer that registers what `bad` says, to check the registry's errors.
class BadRegistration : public nn::Module {
 public:
  explicit BadRegistration(int bad) {
    if (bad == 0) register_parameter("", p_);
    if (bad == 1) {
      register_parameter("w", p_);
      register_buffer("w", t_);  // parameters and buffers share a weight file
    }
    if (bad == 2) {
      register_generator("g", g_);
      register_generator("g", g_);
    }
    if (bad == 3) register_module("c", std::unique_ptr<nn::Module>());
    if (bad == 4) {
      register_module("c", make<nn::ReLU>());
      register_module("c", make<nn::ReLU>());
    }
    if (bad == 5) {  // empty child names may repeat: they add no level
      register_module("", make<nn::ReLU>());
      register_module("", make<nn::ReLU>());
    }
  }
  Tensor forward(const Tensor& x) override { return x; }
  Tensor backward(const Tensor& dy) override { return dy; }
  std::string describe() const override { return "BadRegistration"; }

 private:
  nn::Parameter p_;
  Tensor t_;
  Generator g_;
};

TEST(ModuleRegistry, RegistrationErrorsNameTheProblem) {
  EXPECT_TRUE(throws_error_with([] { BadRegistration b(0); }, {"without a name"}));
  EXPECT_TRUE(throws_error_with([] { BadRegistration b(1); }, {"'w'", "unique"}));
  EXPECT_TRUE(throws_error_with([] { BadRegistration b(2); }, {"generator", "'g'"}));
  EXPECT_TRUE(throws_error_with([] { BadRegistration b(3); }, {"null child", "'c'"}));
  EXPECT_TRUE(throws_error_with([] { BadRegistration b(4); }, {"second child", "'c'"}));
  BadRegistration ok(5);
  int children = 0;
  ok.visit_children([&](nn::Module&) { ++children; });
  EXPECT_EQ(children, 2);
}

// Every built-in layer in one tree. The expected lists are what the hand-written traversals
// (before nn::Module's registry) gave for this tree: names, order and count are unchanged.
TEST(ModuleRegistry, BuiltInLayersKeepTheirNamesAndOrder) {
  nn::manual_seed(1);
  nn::Sequential s(make<nn::Linear>(4, 8), make<nn::ReLU>(), make<nn::Dropout>(0.5f),
                   make<nn::Linear>(8, 2, false));
  s.add("named", make<nn::LayerNorm>(2));
  s.add("", make<nn::Embedding>(3, 2));
  s.add(make<nn::Residual>(
      make<nn::Sequential>(make<nn::Conv2d>(2, 2, 3), make<nn::BatchNorm2d>(2)),
      make<nn::Sequential>(make<nn::Conv2d>(2, 2, 1, 1, 0, false), make<nn::BatchNorm2d>(2))));
  s.add(make<nn::Residual>(make<nn::Dropout>(0.1f)));
  s.add(make<nn::Checkpoint>(make<nn::CausalSelfAttention>(4, 2)));
  s.add(make<nn::MaxPool2d>(2));
  s.add(make<nn::AvgPool2d>(2));
  s.add(make<nn::GlobalAvgPool>());
  s.add(make<nn::Flatten>());
  s.add(make<nn::GELU>());
  const std::vector<std::string> params = {"0.weight",
                                           "0.bias",
                                           "3.weight",
                                           "named.weight",
                                           "named.bias",
                                           "weight",
                                           "6.body.0.weight",
                                           "6.body.0.bias",
                                           "6.body.1.weight",
                                           "6.body.1.bias",
                                           "6.shortcut.0.weight",
                                           "6.shortcut.1.weight",
                                           "6.shortcut.1.bias",
                                           "8.qkv.weight",
                                           "8.qkv.bias",
                                           "8.proj.weight",
                                           "8.proj.bias"};
  const std::vector<std::string> buffers = {"6.body.1.running_mean", "6.body.1.running_var",
                                            "6.shortcut.1.running_mean",
                                            "6.shortcut.1.running_var"};
  const std::vector<std::string> generators = {"2.generator", "7.body.generator"};
  EXPECT_EQ(parameter_names(s), params);
  EXPECT_EQ(buffer_names(s), buffers);
  EXPECT_EQ(generator_names(s), generators);
  EXPECT_EQ(s.parameter_count(), 196);
  // Children in registration order, two levels down.
  std::vector<std::string> tree;
  std::function<void(nn::Module&, int)> walk = [&](nn::Module& m, int depth) {
    if (depth > 0) tree.push_back(std::to_string(depth) + " " + m.describe().substr(0, 12));
    if (depth < 2) m.visit_children([&](nn::Module& c) { walk(c, depth + 1); });
  };
  walk(s, 0);
  EXPECT_EQ(tree, (std::vector<std::string>{"1 Linear(in=4,", "1 ReLU", "1 Dropout(p=0.",
                                            "1 Linear(in=8,", "1 LayerNorm(2,", "1 Embedding(3,",
                                            "1 Residual(Seq", "2 Sequential(C", "2 Sequential(C",
                                            "1 Residual(Dro", "2 Dropout(p=0.", "1 Checkpoint(C",
                                            "2 CausalSelfAt", "1 MaxPool2d(2,", "1 AvgPool2d(2,",
                                            "1 GlobalAvgPoo", "1 Flatten", "1 GELU(tanh)"}));
  // Checkpointing every child adds no name level.
  nn::checkpoint_every(s, 1);
  EXPECT_EQ(parameter_names(s), params);
  EXPECT_EQ(buffer_names(s), buffers);
  EXPECT_EQ(generator_names(s), generators);
}

}  // namespace
}  // namespace stoker::test
