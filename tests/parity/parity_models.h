// The models and batches of the PyTorch parity check (torch_parity.py builds the same models).
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "stoker/nn/batchnorm2d.h"
#include "stoker/nn/conv2d.h"
#include "stoker/nn/pool.h"
#include "stoker/stoker.h"

namespace parity {

using stoker::Tensor;

// mlp: 64 -> 128 -> GELU -> 128 -> ReLU -> 10 (batch 64)
// cnn: conv3x3(3->16) BN ReLU maxpool2 conv3x3(16->32) BN ReLU global-avg-pool -> 10
//      (batch 32 of 3x16x16, NCHW)
// resnet18: the classifier example's torchvision ResNet-18 with 10 classes (batch 16 of
//      3x64x64, NCHW); only when the examples are built (STOKER_PARITY_HAS_CLASSIFIER)
std::unique_ptr<stoker::nn::Module> make_model(const std::string& name);
// Batch `step`: inputs (random normal, Philox seed 1000 + step) and class targets.
std::pair<Tensor, Tensor> make_batch(const std::string& name, int64_t step);

}  // namespace parity
