// Model weights as safetensors files, with PyTorch's state_dict names.
//
// save_weights writes every parameter and buffer of a module under the names
// Module::named_parameters()/visit_buffers() give ("0.weight", "1.running_mean"), so
// `model.load_state_dict(safetensors.torch.load_file(path))` loads it into the equivalent
// torch.nn model. load_weights reads such a file (also one written by PyTorch) into a module:
// every tensor is checked for presence, dtype and shape before any is copied, so a mismatched
// file leaves the model untouched and the error names the file and the tensor.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "stoker/nn/module.h"

namespace stoker::train {

void save_weights(nn::Module& model, const std::filesystem::path& path);

struct LoadWeightsOptions {
  // Tensors of the file the model does not have: an error when strict, else ignored.
  bool strict = true;
  // Names ignored whatever `strict` says (PyTorch's BatchNorm counter, which stoker does not
  // keep: with a fixed momentum it has no effect).
  std::vector<std::string> ignore_suffixes = {"num_batches_tracked"};
};

// Returns the names of file tensors that were ignored.
std::vector<std::string> load_weights(nn::Module& model, const std::filesystem::path& path,
                                      const LoadWeightsOptions& options = {});

}  // namespace stoker::train
