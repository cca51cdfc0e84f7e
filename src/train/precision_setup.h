// Private to the Trainer: TrainerOptions::precision applied in one call to the model (compute
// dtype, FP8 Linear layers), the loss (the fp16 loss scale) and the optimizer (the scaler's
// overflow flag).
#pragma once

#include <memory>

#include "stoker/amp/precision.h"
#include "stoker/nn/loss.h"
#include "stoker/nn/module.h"
#include "stoker/optim/optimizer.h"

namespace stoker::train {

// Throws when the model or the device cannot train in `precision`. Returns the fp16 loss
// scaler (nullptr for the other precisions).
std::unique_ptr<amp::GradScaler> apply_precision(amp::Precision precision,
                                                 const amp::GradScalerOptions& scaler,
                                                 nn::Module& model, nn::Loss& loss,
                                                 optim::Optimizer& optimizer);

}  // namespace stoker::train
