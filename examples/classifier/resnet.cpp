// torchvision's ResNet definitions rebuilt from stoker modules (see resnet.h for the naming).
// Why blocks are Sequential{Residual(body, downsample), ReLU} rather than a dedicated block
// class: the residual add and its backward (dy to both branches) live once, in nn::Residual,
// and every block stays checkpointable and nameable like any other module.
#include "resnet.h"

#include <cmath>
#include <utility>

#include "stoker/core/error.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/batchnorm2d.h"
#include "stoker/nn/conv2d.h"
#include "stoker/nn/linear.h"
#include "stoker/nn/pool.h"

namespace classifier {

namespace {

namespace nn = stoker::nn;
using stoker::Tensor;
using stoker::ops::Layout;

// Bias-free conv with torchvision's kaiming_normal_(mode="fan_out", nonlinearity="relu").
// `input_grad` false for the stem, whose input is the data (no dgrad, as PyTorch).
std::unique_ptr<nn::Conv2d> conv(int64_t in, int64_t out, int64_t k, int64_t stride,
                                 int64_t padding, Layout layout, bool input_grad = true) {
  auto c = nn::make<nn::Conv2d>(in, out, k,
                                nn::Conv2dOptions{.stride = stride,
                                                  .padding = padding,
                                                  .bias = false,
                                                  .layout = layout,
                                                  .input_grad = input_grad});
  const float std = std::sqrt(2.0f / static_cast<float>(out * k * k));
  c->weight().set_value(nn::init_normal(c->weight().shape(), std));
  return c;
}

std::unique_ptr<nn::BatchNorm2d> bn(int64_t channels, Layout layout, bool zero_gamma = false) {
  auto b = nn::make<nn::BatchNorm2d>(channels, 1e-5f, 0.1f, layout);
  if (zero_gamma) b->weight().set_value(Tensor::zeros({channels}, stoker::DType::f32));
  return b;
}

// BN then ReLU, as s's children `bn_name` and `relu_name`; with fuse_bn_relu one BatchNorm2d
// with the ReLU fused (nn::BatchNorm2d::set_activation) under `bn_name`. The ReLU has no
// parameters, so the names of everything stay the same either way.
void add_bn_relu(nn::Sequential& s, const std::string& bn_name, const std::string& relu_name,
                 int64_t channels, const ModelOptions& o) {
  auto b = bn(channels, o.layout);
  if (o.fuse_bn_relu) {
    b->set_activation(nn::Activation::relu);
    s.add(bn_name, std::move(b));
    return;
  }
  s.add(bn_name, std::move(b));
  s.add(relu_name, nn::make<nn::ReLU>());
}

// Sequential{"" : Residual(body, downsample), "relu" : ReLU}; downsample (1x1 conv + BN) when
// the block changes the shape. With fuse_block_tail the ReLU moves into the Residual, fused with
// the body's last BN and the add (nn::Residual::set_tail_relu), and the "relu" child goes.
std::unique_ptr<nn::Module> block(std::unique_ptr<nn::Sequential> body, int64_t in, int64_t out,
                                  int64_t stride, const ModelOptions& o) {
  const Layout layout = o.layout;
  std::unique_ptr<nn::Sequential> downsample;
  if (stride != 1 || in != out) {
    downsample = nn::make<nn::Sequential>();
    downsample->add(conv(in, out, 1, stride, 0, layout));
    downsample->add(bn(out, layout));
  }
  auto b = nn::make<nn::Sequential>();
  auto& r =
      b->add("", nn::make<nn::Residual>(std::move(body), std::move(downsample),
                                        nn::ResidualNames{.body = "", .shortcut = "downsample"}));
  if (o.fuse_block_tail) {
    r.set_tail_relu(true);
    return b;
  }
  b->add("relu", nn::make<nn::ReLU>());
  return b;
}

// torchvision BasicBlock: 3x3 (stride) - BN - ReLU - 3x3 - BN, expansion 1.
std::unique_ptr<nn::Module> basic_block(int64_t in, int64_t planes, int64_t stride,
                                        const ModelOptions& o) {
  auto body = nn::make<nn::Sequential>();
  body->add("conv1", conv(in, planes, 3, stride, 1, o.layout));
  add_bn_relu(*body, "bn1", "relu", planes, o);
  body->add("conv2", conv(planes, planes, 3, 1, 1, o.layout));
  body->add("bn2", bn(planes, o.layout, o.zero_init_residual));
  return block(std::move(body), in, planes, stride, o);
}

// torchvision Bottleneck (v1.5): 1x1 - BN - ReLU - 3x3 (stride) - BN - ReLU - 1x1 (x4) - BN.
std::unique_ptr<nn::Module> bottleneck(int64_t in, int64_t planes, int64_t stride,
                                       const ModelOptions& o) {
  const int64_t out = planes * 4;
  auto body = nn::make<nn::Sequential>();
  body->add("conv1", conv(in, planes, 1, 1, 0, o.layout));
  add_bn_relu(*body, "bn1", "relu1", planes, o);
  body->add("conv2", conv(planes, planes, 3, stride, 1, o.layout));
  add_bn_relu(*body, "bn2", "relu2", planes, o);
  body->add("conv3", conv(planes, out, 1, 1, 0, o.layout));
  body->add("bn3", bn(out, o.layout, o.zero_init_residual));
  return block(std::move(body), in, out, stride, o);
}

std::unique_ptr<nn::Sequential> resnet(bool bottlenecks, const int (&blocks)[4],
                                       const ModelOptions& o) {
  STOKER_CHECK(o.num_classes > 0, "ResNet: num_classes ", o.num_classes, " must be positive");
  auto m = nn::make<nn::Sequential>();
  m->add("conv1", conv(3, 64, 7, 2, 3, o.layout, /*input_grad=*/false));
  add_bn_relu(*m, "bn1", "relu", 64, o);
  m->add("maxpool", nn::make<nn::MaxPool2d>(3, 2, 1, o.layout));
  const int64_t expansion = bottlenecks ? 4 : 1;
  int64_t in = 64;
  for (int l = 0; l < 4; ++l) {
    const int64_t planes = int64_t{64} << l;
    for (int b = 0; b < blocks[l]; ++b) {
      const int64_t stride = (l > 0 && b == 0) ? 2 : 1;
      const std::string name = "layer" + std::to_string(l + 1) + "." + std::to_string(b);
      m->add_module(name, bottlenecks ? bottleneck(in, planes, stride, o)
                                      : basic_block(in, planes, stride, o));
      in = planes * expansion;
    }
  }
  m->add("avgpool", nn::make<nn::GlobalAvgPool>(o.layout));
  m->add("fc", nn::make<nn::Linear>(in, o.num_classes));
  return m;
}

}  // namespace

std::unique_ptr<nn::Sequential> resnet18(const ModelOptions& options) {
  return resnet(false, {2, 2, 2, 2}, options);
}

std::unique_ptr<nn::Sequential> resnet50(const ModelOptions& options) {
  return resnet(true, {3, 4, 6, 3}, options);
}

std::unique_ptr<nn::Sequential> small_cnn(const ModelOptions& o) {
  STOKER_CHECK(o.num_classes > 0 && o.small_width > 0, "small CNN: num_classes ", o.num_classes,
               " and width ", o.small_width, " must be positive");
  const int64_t w = o.small_width;
  auto m = nn::make<nn::Sequential>();
  m->add("conv1", conv(3, w, 3, 1, 1, o.layout, /*input_grad=*/false));
  add_bn_relu(*m, "bn1", "relu", w, o);
  m->add_module("layer1.0", basic_block(w, w, 1, o));
  m->add_module("layer2.0", basic_block(w, 2 * w, 2, o));
  m->add_module("layer3.0", basic_block(2 * w, 4 * w, 2, o));
  m->add("avgpool", nn::make<nn::GlobalAvgPool>(o.layout));
  m->add("fc", nn::make<nn::Linear>(4 * w, o.num_classes));
  return m;
}

std::unique_ptr<nn::Sequential> make_model(const std::string& arch, const ModelOptions& options) {
  if (arch == "small") return small_cnn(options);
  if (arch == "resnet18") return resnet18(options);
  if (arch == "resnet50") return resnet50(options);
  STOKER_THROW("--arch '", arch, "': use small, resnet18 or resnet50");
}

}  // namespace classifier
