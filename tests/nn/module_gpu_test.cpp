// nn::Module's registry on the GPU: to(device) moves every registered part of a layer that has
// no traversal code of its own (tests/nn/registered_layer.h) — its parameter, buffer and child
// — and the moved model trains there (an SGD step changes every parameter) and comes back.
#include <gtest/gtest.h>

#include <functional>
#include <memory>

#include "nn/registered_layer.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/loss.h"
#include "stoker/optim/optimizer.h"
#include "test_util.h"

namespace stoker::test {
namespace {

// Every parameter (value and gradient), buffer and module of `m` is on `device`.
void expect_all_on(nn::Module& m, Device device) {
  for (auto& [n, p] : m.named_parameters()) {
    EXPECT_EQ(p->value().device(), device) << n;
    EXPECT_EQ(p->grad().device(), device) << n;
  }
  int buffers = 0;
  m.visit_buffers("", [&](const std::string& n, Tensor& t) {
    EXPECT_EQ(t.device(), device) << n;
    ++buffers;
  });
  EXPECT_EQ(buffers, 1);
  std::function<void(nn::Module&)> walk = [&](nn::Module& mod) {
    EXPECT_EQ(mod.device(), device) << mod.describe();
    mod.visit_children(walk);
  };
  walk(m);
}

TEST(ModuleRegistryGpu, ToMovesEveryRegisteredPart) {
  STOKER_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  nn::manual_seed(6);
  nn::Sequential m(nn::make<nn::Linear>(3, 4), nn::make<ShiftedLinear>(4, 2));
  auto& layer = dynamic_cast<ShiftedLinear&>(m[1]);
  m.to(gpu);
  expect_all_on(m, gpu);
  EXPECT_EQ(layer.shift().device(), gpu);
  EXPECT_EQ(layer.marker().to_floats(), std::vector<float>(2, 7.0f));

  std::vector<std::vector<float>> before;
  for (auto& [n, p] : m.named_parameters()) before.push_back(p->value().to_floats());
  optim::SGD opt(m.named_parameters(), {.lr = 0.1f});
  opt.zero_grad();
  nn::MSELoss loss;
  loss.forward(m.forward(random_tensor({5, 3}, DType::f32, 11).to(gpu)),
               random_tensor({5, 2}, DType::f32, 12).to(gpu));
  m.backward(loss.backward());
  opt.step();
  const auto named = m.named_parameters();
  for (size_t i = 0; i < named.size(); ++i)
    EXPECT_NE(named[i].second->value().to_floats(), before[i]) << named[i].first << " unchanged";

  m.to(Device::cpu());
  expect_all_on(m, Device::cpu());
  EXPECT_EQ(layer.marker().to_floats(), std::vector<float>(2, 7.0f));
}

}  // namespace
}  // namespace stoker::test
