// safetensors files: the weight format Python users load with `safetensors.torch.load_file`.
//
// Layout (https://github.com/huggingface/safetensors): an 8-byte little-endian header length N,
// N bytes of JSON {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"key": "value"}}, then the raw little-endian tensor bytes, offsets relative
// to the end of the header.
//
// Reading validates everything before touching tensor bytes: a truncated file, a header length
// beyond the file, bad JSON, an unknown dtype, offsets outside the data section or overlapping,
// or a byte count that does not match the shape all throw stoker::Error naming the file and the
// tensor — never a crash or an over-read. Writing is atomic: a temporary file in the same
// folder, fsync, rename, fsync of the folder; an interrupted save leaves the old file intact.
//
// Thread-safety: a SafetensorsReader may be read from several threads once opened.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "stoker/core/tensor.h"

namespace stoker::train {

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

// Writes `tensors` (any devices: GPU tensors are copied to the host) and optional string
// metadata to `path`, atomically. Names must be unique and non-empty.
void save_safetensors(const std::filesystem::path& path, std::span<const NamedTensor> tensors,
                      const std::map<std::string, std::string>& metadata = {});

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
  };

  const std::filesystem::path& path() const { return path_; }
  // Tensor names in file order of their data.
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  const Entry& entry(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The tensor's values, copied into a new tensor on `device`.
  Tensor load(const std::string& name, Device device = Device::cpu()) const;
  // Copies the tensor's values into `dst`, which must have the file's dtype and shape (the
  // error names the file, the tensor, and both shapes otherwise).
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
};

// All tensors of a file, on `device`.
std::vector<NamedTensor> load_safetensors(const std::filesystem::path& path,
                                          Device device = Device::cpu());

// "F32", "BF16", ... as safetensors spells the dtype; and back (throws on unknown names).
const char* safetensors_dtype_name(DType t);
DType parse_safetensors_dtype(const std::string& name, const std::string& context);

}  // namespace stoker::train
