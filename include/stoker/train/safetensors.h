// safetensors files (https://github.com/huggingface/safetensors): the weight format Python users
// load with `safetensors.torch.load_file`, and save_weights / load_weights of a model. Reading
// validates the whole header before touching tensor bytes (errors name the file and tensor) and
// checks stoker's header and per-tensor XXH3-64 checksums where present; writing is atomic
// (temporary file, fsync, rename), so an interrupted save leaves the old file intact.
// Thread-safety: a SafetensorsReader may be read from several threads once opened.
// Details: docs/formats.md#header-checksum-every-stoker-written-safetensors-file.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "stoker/core/tensor.h"
#include "stoker/nn/module.h"

namespace stoker::train {

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

// The metadata key of the per-tensor checksums.
inline constexpr const char* kChecksumsKey = "stoker.checksums";
// The metadata key of the header checksum, and of the version that requires it.
inline constexpr const char* kHeaderChecksumKey = "stoker.header_checksum";
inline constexpr const char* kSafetensorsVersionKey = "stoker.safetensors_version";
// The version stoker writes: 2 = per-tensor and header checksums (absent or 1: neither required).
inline constexpr int kSafetensorsVersion = 2;

struct SafetensorsWriteOptions {
  // Store kChecksumsKey, kHeaderChecksumKey and kSafetensorsVersionKey (replacing values given
  // in the metadata). Off: the file carries only the metadata given, less a header checksum
  // and version given (they could not be right), as files written before checksums existed.
  bool checksums = true;
};

// Writes `tensors` (any devices: GPU tensors are copied to the host) and optional string
// metadata to `path`, atomically. Names must be unique and non-empty.
void save_safetensors(const std::filesystem::path& path, std::span<const NamedTensor> tensors,
                      const std::map<std::string, std::string>& metadata = {},
                      const SafetensorsWriteOptions& options = {});

// An opened, validated safetensors file; tensors are read on demand.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::filesystem::path& path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  struct Entry {
    DType dtype;
    Shape shape;
    size_t begin = 0;  // byte offsets in the data section
    size_t end = 0;
    bool has_checksum = false;  // kChecksumsKey lists this tensor
    uint64_t checksum = 0;      // the stored XXH3-64 of its bytes
    size_t index = 0;           // position in names()
  };

  // A tensor's stored checksum against the one of its bytes now (`computed` is only evaluated
  // when one is stored; ok() without one).
  struct ChecksumCheck {
    bool stored = false;
    uint64_t expected = 0;
    uint64_t computed = 0;
    bool ok() const { return !stored || expected == computed; }
  };

  const std::filesystem::path& path() const { return path_; }
  // Tensor names in file order of their data.
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  const Entry& entry(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Whether the file carries checksums (kChecksumsKey).
  bool has_checksums() const { return has_checksums_; }
  // Whether the file carries a header checksum (kHeaderChecksumKey); when it does, the
  // constructor has verified it.
  bool has_header_checksum() const { return has_header_checksum_; }
  // Bytes of the file and of its header (the JSON, without the 8-byte length).
  size_t file_size() const { return file_size_; }
  size_t header_size() const { return data_start_ - 8; }

  // Checks the tensor's bytes against its stored checksum. A tensor that passes is not checked
  // again by this reader.
  ChecksumCheck check_checksum(const std::string& name) const;
  // check_checksum(), throwing on a mismatch: the error names the file, the tensor and both
  // values ("the file is damaged").
  void verify(const std::string& name) const;

  // The tensor's values, copied into a new tensor on `device` (verified first).
  Tensor load(const std::string& name, Device device = Device::cpu()) const;
  // Copies the tensor's values into `dst`, which must have the file's dtype and shape (the
  // error names the file, the tensor, and both shapes otherwise); verified first.
  void load_into(const std::string& name, const Tensor& dst) const;

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  const unsigned char* map_ = nullptr;
  size_t file_size_ = 0;
  size_t data_start_ = 0;
  std::map<std::string, Entry> entries_;
  std::vector<std::string> names_;
  std::map<std::string, std::string> metadata_;
  bool has_checksums_ = false;
  bool has_header_checksum_ = false;
  // Tensors whose checksum passed, by Entry::index (readers may run on several threads).
  std::unique_ptr<std::atomic<bool>[]> verified_;
};

// All tensors of a file, on `device`.
std::vector<NamedTensor> load_safetensors(const std::filesystem::path& path,
                                          Device device = Device::cpu());

// The header checksum of a whole safetensors file's first `header_end` bytes (8 + the header
// length) whose kHeaderChecksumKey value starts at byte `value_at`: XXH3-64 with those 16 bytes
// read as '0' (docs/formats.md).
uint64_t safetensors_header_checksum(const unsigned char* file, size_t header_end, size_t value_at);

// "F32", "BF16", ... as safetensors spells the dtype; and back (throws on unknown names).
const char* safetensors_dtype_name(DType t);
DType parse_safetensors_dtype(const std::string& name, const std::string& context);

}  // namespace stoker::train

// Model weights as safetensors files, with PyTorch's state_dict names.
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
