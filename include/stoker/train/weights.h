// Model weights as safetensors files, with PyTorch's state_dict names.
//
// save_weights writes every parameter and buffer of a module under the names
// Module::named_parameters()/visit_buffers() give ("0.weight", "1.running_mean"), so
// `model.load_state_dict(safetensors.torch.load_file(path))` loads it into the equivalent
// torch.nn model. load_weights reads such a file (also one written by PyTorch) into a module:
// every tensor is checked for presence, dtype and shape before any is copied, so a mismatched
// file leaves the model untouched and the error names the file and the tensor.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "stoker/nn/module.h"

namespace stoker::train {

void save_weights(nn::Module& model, const std::filesystem::path& path);

// The bytes of the file save_weights writes for `model` (its tensors; the header aside).
uint64_t weights_file_bytes(nn::Module& model);

// Before training, for a program that saves the weights at its end: refuses (stoker::Error
// naming `flag`, the path and both numbers) when the disk of `path` has less room than the
// weights take; warns on stderr when it has less than twice that (the atomic write needs the
// old file and the new one at once).
void check_space_for_weights(nn::Module& model, const std::filesystem::path& path,
                             const std::string& flag);

// save_weights at the end of a run, when losing the trained weights would cost the run: when
// `path` cannot be written (disk full, an I/O error, the folder gone), the weights go to a new
// file beside it, in each of `fallback_dirs`, in $TMPDIR (or /tmp) or the current folder
// (train/checkpoint_files.h: fallback_paths), the first that works, and then an error names
// `flag`, the failure and that file (so the program still fails); when no place works, the
// error names every place tried.
void save_weights_with_fallback(nn::Module& model, const std::filesystem::path& path,
                                const std::string& flag,
                                const std::vector<std::filesystem::path>& fallback_dirs = {});

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
