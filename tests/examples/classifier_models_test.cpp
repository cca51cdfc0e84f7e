// examples/classifier's models on the CPU: torchvision's parameter counts and names, the same
// loss and gradients in NCHW and NHWC (the small CNN and ResNet-18 at 32x32), the zero-init
// option, fuse_bn_relu and fuse_block_tail against separate ReLU modules (same names, same bits),
// and a short training on packed synthetic shapes that learns far above chance.
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "resnet.h"
#include "stoker/stoker.h"
#include "test_util.h"

namespace classifier {
namespace {

namespace nn = stoker::nn;
using stoker::DType;
using stoker::Tensor;
using stoker::ops::Layout;

std::map<std::string, nn::Parameter*> params_by_name(nn::Module& m) {
  std::map<std::string, nn::Parameter*> out;
  for (const auto& [n, p] : m.named_parameters()) out[n] = p;
  return out;
}

// Built once for the tests that only inspect them (drawing 37M initial weights takes seconds).
nn::Sequential& shared_resnet18() {
  static const auto m = resnet18();
  return *m;
}
nn::Sequential& shared_resnet50() {
  static const auto m = resnet50();
  return *m;
}

TEST(ClassifierModelsTest, ParameterCountsEqualTorchvision) {
  // torchvision.models.resnet18() / resnet50(): sum(p.numel() for p in m.parameters()).
  EXPECT_EQ(shared_resnet18().parameter_count(), 11689512);
  EXPECT_EQ(shared_resnet50().parameter_count(), 25557032);
  // len(list(m.parameters())): 62 and 161 tensors.
  EXPECT_EQ(shared_resnet18().parameters().size(), 62u);
  EXPECT_EQ(shared_resnet50().parameters().size(), 161u);
  // The small CNN (width 8, 4 classes): stem 3*8*9 + 2*8; blocks 8->8 (2 convs + 2 BN),
  // 8->16 and 16->32 with a downsample each; fc 32*4 + 4.
  const int64_t small = (3 * 8 * 9 + 16) + (2 * (8 * 8 * 9 + 16)) +
                        (8 * 16 * 9 + 32 + 16 * 16 * 9 + 32 + 8 * 16 + 32) +
                        (16 * 32 * 9 + 64 + 32 * 32 * 9 + 64 + 16 * 32 + 64) + (32 * 4 + 4);
  EXPECT_EQ(small_cnn({.num_classes = 4, .small_width = 8})->parameter_count(), small);
}

TEST(ClassifierModelsTest, NamesAreTorchvisionStateDictKeys) {
  nn::Sequential& m = shared_resnet50();
  const auto p = params_by_name(m);
  for (const char* name :
       {"conv1.weight", "bn1.weight", "bn1.bias", "layer1.0.conv1.weight", "layer1.0.conv3.weight",
        "layer1.0.bn3.weight", "layer1.0.downsample.0.weight", "layer1.0.downsample.1.bias",
        "layer2.0.conv2.weight", "layer3.5.bn2.bias", "layer4.2.conv3.weight", "fc.weight",
        "fc.bias"})
    EXPECT_TRUE(p.count(name)) << name;
  EXPECT_FALSE(p.count("layer1.1.downsample.0.weight"));  // identity shortcut
  // torchvision v1.5: the stride sits on the 3x3 conv of the first block of layers 2-4.
  EXPECT_EQ(p.at("layer2.0.conv2.weight")->shape(), (stoker::Shape{128, 128, 3, 3}));
  EXPECT_EQ(p.at("layer2.0.downsample.0.weight")->shape(), (stoker::Shape{512, 256, 1, 1}));
  EXPECT_EQ(p.at("fc.weight")->shape(), (stoker::Shape{1000, 2048}));
  std::vector<std::string> buffers;
  m.visit_buffers("", [&](const std::string& n, Tensor&) { buffers.push_back(n); });
  EXPECT_NE(std::find(buffers.begin(), buffers.end(), "layer4.2.bn3.running_var"), buffers.end());

  const auto q = params_by_name(shared_resnet18());
  EXPECT_TRUE(q.count("layer1.1.conv2.weight"));
  EXPECT_TRUE(q.count("layer2.0.downsample.1.weight"));
  EXPECT_FALSE(q.count("layer1.0.downsample.0.weight"));  // 64 -> 64, stride 1
  EXPECT_FALSE(q.count("layer1.0.conv3.weight"));         // BasicBlock: two convs
}

TEST(ClassifierModelsTest, ZeroInitResidualZeroesTheLastGammaOfEachBlock) {
  auto m = small_cnn({.num_classes = 4, .zero_init_residual = true, .small_width = 8});
  const auto p = params_by_name(*m);
  for (const char* name : {"layer1.0.bn2.weight", "layer3.0.bn2.weight"}) {
    const std::vector<float> g = p.at(name)->value().to_floats();
    EXPECT_TRUE(std::all_of(g.begin(), g.end(), [](float v) { return v == 0.0f; })) << name;
  }
  for (const char* name : {"layer1.0.bn1.weight", "layer3.0.downsample.1.weight", "bn1.weight"}) {
    const std::vector<float> g = p.at(name)->value().to_floats();
    EXPECT_TRUE(std::all_of(g.begin(), g.end(), [](float v) { return v == 1.0f; })) << name;
  }
  EXPECT_THROW(make_model("resnet34", {}), stoker::Error);
}

struct Pass {
  double loss = 0;
  std::vector<float> logits;
  std::map<std::string, std::vector<float>> grads;
  std::map<std::string, std::vector<float>> buffers;  // after the step's forward: running stats
};

struct Fusions {
  bool bn_relu = true;
  bool block_tail = true;
};

// One training-mode forward + cross-entropy + backward of a freshly seeded model on a batch
// given in NCHW (converted for NHWC models).
Pass run_pass(const std::string& arch, Layout layout, const Tensor& x_nchw, const Tensor& y,
              Fusions fuse = {}) {
  nn::manual_seed(11);
  auto m = make_model(arch, {.num_classes = 5,
                             .layout = layout,
                             .fuse_bn_relu = fuse.bn_relu,
                             .fuse_block_tail = fuse.block_tail,
                             .small_width = 8});
  Tensor x = x_nchw;
  if (layout == Layout::nhwc) {
    const auto d = stoker::ops::dims4(x_nchw.shape(), Layout::nchw);
    x = Tensor::empty(stoker::ops::shape4(d, Layout::nhwc), DType::f32);
    stoker::ops::convert_layout(x, x_nchw, Layout::nchw, Layout::nhwc);
  }
  nn::CrossEntropyLoss loss;
  const Tensor logits = m->forward(x);
  Pass r;
  r.loss = loss.forward(logits, y).item();
  r.logits = logits.to_floats();
  m->backward(loss.backward());
  for (const auto& [n, p] : m->named_parameters()) r.grads[n] = p->grad().to_floats();
  m->visit_buffers("", [&](const std::string& n, Tensor& t) { r.buffers[n] = t.to_floats(); });
  return r;
}

void expect_layouts_agree(const std::string& arch, int64_t batch, int64_t size) {
  const Tensor x = stoker::test::random_tensor({batch, 3, size, size}, DType::f32, 5, -2.0f, 2.0f);
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < batch; ++i) labels.push_back(i % 5);
  const Tensor y = Tensor::from_vector(labels, {batch});
  const Pass a = run_pass(arch, Layout::nchw, x, y);
  const Pass b = run_pass(arch, Layout::nhwc, x, y);
  EXPECT_NEAR(a.loss, b.loss, 1e-5 * std::max(1.0, std::abs(a.loss))) << arch;
  ASSERT_EQ(a.logits.size(), b.logits.size());
  for (size_t i = 0; i < a.logits.size(); ++i)
    EXPECT_NEAR(a.logits[i], b.logits[i], 1e-4f) << arch << " logit " << i;
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (const auto& [name, ga] : a.grads) {
    const std::vector<float>& gb = b.grads.at(name);
    ASSERT_EQ(ga.size(), gb.size()) << name;
    float scale = 0;
    for (float v : ga) scale = std::max(scale, std::abs(v));
    ASSERT_GT(scale, 0.0f) << arch << " " << name << ": no gradient (a vacuous comparison)";
    for (size_t i = 0; i < ga.size(); ++i)
      ASSERT_NEAR(ga[i], gb[i], 1e-3f * scale + 1e-6f) << arch << " " << name << "[" << i << "]";
  }
}

TEST(ClassifierModelsTest, SmallCnnNchwAndNhwcGiveTheSameLossAndGradients) {
  expect_layouts_agree("small", 4, 16);
}

TEST(ClassifierModelsTest, ResNet18NchwAndNhwcGiveTheSameLossAndGradients) {
  // 64x64: layer4 sees 2x2, so its BatchNorms average 16 values (over fewer, e.g. 32x32 at
  // batch 2, the batch variance is tiny and amplifies rounding differences of the two layouts).
  expect_layouts_agree("resnet18", 4, 64);
}

// fuse_bn_relu (BatchNorm2d with the ReLU fused) and fuse_block_tail (relu(bn + shortcut) in
// one op) against torchvision's separate ReLU modules: the same names in the same order, and the
// same loss, logits, gradients and running statistics bit for bit.
void expect_fusion_changes_nothing(const std::string& arch, Layout layout, int64_t batch,
                                   int64_t size, Fusions fused = {}) {
  const auto names = [&](Fusions f) {
    nn::manual_seed(11);
    auto m = make_model(arch, {.num_classes = 5,
                               .layout = layout,
                               .fuse_bn_relu = f.bn_relu,
                               .fuse_block_tail = f.block_tail,
                               .small_width = 8});
    std::vector<std::string> out;
    for (const auto& [n, p] : m->named_parameters()) out.push_back(n);
    m->visit_buffers("", [&](const std::string& n, Tensor&) { out.push_back(n); });
    return out;
  };
  const Fusions plain{.bn_relu = false, .block_tail = false};
  EXPECT_EQ(names(fused), names(plain)) << arch;
  const Tensor x = stoker::test::random_tensor({batch, 3, size, size}, DType::f32, 7, -2.0f, 2.0f);
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < batch; ++i) labels.push_back(i % 5);
  const Tensor y = Tensor::from_vector(labels, {batch});
  const Pass a = run_pass(arch, layout, x, y, fused);
  const Pass b = run_pass(arch, layout, x, y, plain);
  EXPECT_EQ(a.loss, b.loss) << arch;
  EXPECT_EQ(a.logits, b.logits) << arch;
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (const auto& [name, ga] : a.grads) EXPECT_EQ(ga, b.grads.at(name)) << arch << " " << name;
  ASSERT_EQ(a.buffers.size(), b.buffers.size());
  for (const auto& [name, ba] : a.buffers) EXPECT_EQ(ba, b.buffers.at(name)) << arch << " " << name;
}

TEST(ClassifierModelsTest, FusedBnReluChangesNothingButTheModules) {
  const Fusions bn_relu_only{.bn_relu = true, .block_tail = false};
  expect_fusion_changes_nothing("small", Layout::nchw, 4, 16, bn_relu_only);
  expect_fusion_changes_nothing("small", Layout::nhwc, 4, 16, bn_relu_only);
  expect_fusion_changes_nothing("resnet18", Layout::nhwc, 2, 32, bn_relu_only);
  // The fused model really has fewer modules: no ReLU inside the bodies or after the stem BN.
  nn::manual_seed(11);
  auto fused = make_model(
      "small",
      {.num_classes = 5, .fuse_bn_relu = true, .fuse_block_tail = false, .small_width = 8});
  auto plain = make_model("small", {.num_classes = 5, .fuse_bn_relu = false, .small_width = 8});
  const std::string df = fused->describe(), dp = plain->describe();
  EXPECT_NE(df.find("relu)"), std::string::npos) << df;
  EXPECT_EQ(dp.find("relu)"), std::string::npos) << dp;
  // ReLU modules: small has a stem and three BasicBlocks; fused, only the blocks' final ReLU
  // (after the residual add) stays a module.
  const auto relus = [](const std::string& d) {
    int n = 0;
    for (size_t at = d.find("ReLU"); at != std::string::npos; at = d.find("ReLU", at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(relus(df), 3) << df;
  EXPECT_EQ(relus(dp), 7) << dp;
}

// fuse_block_tail, alone and with fuse_bn_relu (what --fuse-bn-relu builds): the blocks' tail
// ReLU moves into the Residual, and nothing else changes.
TEST(ClassifierModelsTest, FusedBlockTailChangesNothingButTheModules) {
  const Fusions tail_only{.bn_relu = false, .block_tail = true};
  const Fusions both{.bn_relu = true, .block_tail = true};
  expect_fusion_changes_nothing("small", Layout::nchw, 4, 16, tail_only);
  expect_fusion_changes_nothing("small", Layout::nhwc, 4, 16, tail_only);
  expect_fusion_changes_nothing("small", Layout::nchw, 4, 16, both);
  expect_fusion_changes_nothing("small", Layout::nhwc, 4, 16, both);
  expect_fusion_changes_nothing("resnet18", Layout::nhwc, 2, 32, both);
  expect_fusion_changes_nothing("resnet18", Layout::nchw, 2, 32, tail_only);
  nn::manual_seed(11);
  auto fused = make_model(
      "small", {.num_classes = 5, .fuse_bn_relu = true, .fuse_block_tail = true, .small_width = 8});
  const std::string df = fused->describe();
  // No ReLU module left: the stem's ReLU is fused into its BN, the blocks' into the Residual.
  int relus = 0;
  for (size_t at = df.find("ReLU"); at != std::string::npos; at = df.find("ReLU", at + 1)) ++relus;
  EXPECT_EQ(relus, 0) << df;
  EXPECT_NE(df.find("+residual, relu)"), std::string::npos) << df;
}

// A few hundred packed synthetic shapes, the Loader, the Trainer (the classifier's recipe: SGD
// with momentum, warm-up + cosine): validation accuracy far above chance (25 %) after four
// short epochs.
TEST(ClassifierModelsTest, ShortTrainingOnSyntheticShapesLearns) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("stoker_classifier_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const int size = 16;
  stoker::data::pack_synth({.samples = 512, .classes = 4, .size = size, .seed = 1}, dir / "train",
                           {.threads = 1, .progress = false});
  stoker::data::pack_synth({.samples = 256, .classes = 4, .size = size, .seed = 2}, dir / "val",
                           {.threads = 1, .progress = false});
  {
    stoker::data::LmdbImageDataset train_ds(dir / "train"), val_ds(dir / "val");
    stoker::data::LoaderOptions lo;
    lo.batch_size = 32;
    lo.threads = 1;
    lo.transform.output_size = size;
    lo.transform.scale_min = 0.35;
    lo.transform.eval_resize = size;
    lo.layout = Layout::nhwc;
    stoker::data::Loader train(train_ds, lo);
    lo.transform.train = false;
    lo.shuffle = false;
    lo.drop_last = false;
    stoker::data::Loader val(val_ds, lo);

    nn::manual_seed(3);
    auto m = small_cnn({.num_classes = 4, .layout = Layout::nhwc, .small_width = 16});
    stoker::optim::SGD opt(m->named_parameters(),
                           {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 5e-5f});
    nn::CrossEntropyLoss loss;
    const int64_t steps = train.batches_per_epoch() * 4;
    stoker::train::Trainer t(
        *m, loss, opt,
        {.schedule = stoker::optim::cosine_with_warmup(0.1f, train.batches_per_epoch(), steps),
         .progress_bar = false,
         .quiet = true});
    const auto before = t.evaluate(val);
    t.fit(train, 4);
    const auto after = t.evaluate(val);
    EXPECT_EQ(after.samples, 256);
    EXPECT_LT(after.loss, before.loss);
    EXPECT_GT(after.accuracy, 0.6) << "before training " << before.accuracy;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace classifier
