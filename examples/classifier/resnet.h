// The classifier example's models: torchvision's ResNet-18 (BasicBlock) and ResNet-50
// (Bottleneck, ResNet v1.5: the stride on the 3x3 conv), and a small CNN for CPU runs.
//
// Every model is an nn::Sequential whose children are the stem (conv1, bn1, relu, maxpool),
// then each residual block as its own child ("layer1.0", "layer1.1", ..., "layer4.1"), then
// avgpool and fc. Blocks are direct children so that TrainerOptions::activation_checkpoint_every
// checkpoints whole blocks. Parameter and buffer names are torchvision's state_dict names
// ("conv1.weight", "layer1.0.conv1.weight", "layer2.0.downsample.0.weight",
// "layer1.0.bn1.running_mean", "fc.weight"), so weight files load into torchvision.models.
// A block is Sequential{"" : Residual(body, downsample), "relu" : ReLU}: the empty names add
// no level, so the block's parameters sit directly under "layerL.B".
//
// Initialization as torchvision: convs kaiming_normal(fan_out, relu), BN gamma 1 / beta 0,
// fc PyTorch's Linear default; `zero_init_residual` zeroes the last BN gamma of each block
// (each block then starts as the identity). Weights are drawn from nn::init_generator() in
// construction order (nn::manual_seed reproduces a model).
//
// fuse_bn_relu (off by default here; stoker_classifier turns it on unless --no-fuse-bn-relu):
// every BN that torchvision follows by a ReLU inside a block or in
// the stem (bn1 of the stem, bn1 / bn2 of the bodies) is one nn::BatchNorm2d with the ReLU fused
// (BatchNorm2d::set_activation(relu)); the blocks' final ReLU, after the residual add, stays an
// nn::ReLU. Same results (bit for bit on the CPU) and the same names as separate ReLU modules;
// on the GPU's NHWC path one pass over the activation less in the forward and one dz buffer
// less in the backward per fused BN. Off builds torchvision's module list one to one.
//
// fuse_block_tail (off by default; stoker_classifier sets it with fuse_bn_relu): each block's
// tail relu(bn(x) + shortcut) — the body's last BN, the residual add and the block's ReLU — runs
// as one batch-norm op with a residual (nn::Residual::set_tail_relu): the block is then
// Sequential{"" : Residual(body, downsample) with the ReLU inside}, no "relu" child. Same names
// (the ReLU has no parameters), same results (bit for bit on the CPU); on the GPU's NHWC path
// 3 reads + 1 write of the activation in the forward instead of 5 + 3, 5 + 2 in the backward
// instead of 6 + 2.
//
// Layout: every conv, BN and pool computes in `layout` (NCHW, or NHWC = channels-last); the
// input batch must come in the same layout. Models are built on the CPU; move them with to().
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "stoker/nn/containers.h"
#include "stoker/ops/layout.h"

namespace classifier {

struct ModelOptions {
  int64_t num_classes = 1000;
  stoker::ops::Layout layout = stoker::ops::Layout::nchw;
  bool zero_init_residual = false;
  bool fuse_bn_relu = false;     // see above
  bool fuse_block_tail = false;  // see above
  // Small CNN: channels of its first stage (doubled at each of its three stages).
  int64_t small_width = 32;
};

// ResNet-18: 11,689,512 parameters for 1000 classes (torchvision.models.resnet18).
std::unique_ptr<stoker::nn::Sequential> resnet18(const ModelOptions& options = {});
// ResNet-50: 25,557,032 parameters for 1000 classes (torchvision.models.resnet50).
std::unique_ptr<stoker::nn::Sequential> resnet50(const ModelOptions& options = {});
// A small residual CNN for CPU runs on small images (e.g. 32x32 synthetic shapes): conv3x3 stem,
// three stages of one BasicBlock each (stride 1, 2, 2; widths w, 2w, 4w), avgpool, fc.
std::unique_ptr<stoker::nn::Sequential> small_cnn(const ModelOptions& options = {});

// "small", "resnet18" or "resnet50"; throws stoker::Error naming the choices otherwise.
std::unique_ptr<stoker::nn::Sequential> make_model(const std::string& arch,
                                                   const ModelOptions& options);

}  // namespace classifier
