// Fuzz target: train::SafetensorsReader, the checkpoint / weights reader.
//
// Input: the whole file. It is written to a scratch folder of this process and opened; every
// tensor it lists is loaded onto the CPU. stoker::Error is the expected outcome of a bad file.
// Findings, besides crashes and sanitizer reports: another exception type, a file descriptor
// or a memory map left open, a file that opens (header "validated") but whose tensors do not
// load (other than for a failed checksum), or load other bytes than the ones its offsets name,
// or load in spite of a failed checksum. A file that loads is saved again with save_safetensors
// and must read back identical (its own checksums aside), leaving no temporary file.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "stoker/core/error.h"
#include "stoker/train/safetensors.h"

namespace {

using stoker::fuzz::mapped_under;
using stoker::fuzz::open_fds_under;
using stoker::fuzz::scratch_dir;
namespace fs = std::filesystem;

void write_input(const fs::path& path, const uint8_t* data, size_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  STOKER_FUZZ_EXPECT(fd >= 0, "cannot create " + path.string());
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    STOKER_FUZZ_EXPECT(n > 0, "cannot write " + path.string());
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

// Opens `path` and loads every tensor; checks each against the raw bytes its offsets name when
// `file` is given. Returns false when the reader refuses the file (a stoker::Error);
// `all_loaded` is false when a tensor failed its checksum (`tensors` holds the others).
bool load_all(const fs::path& path, const uint8_t* file, size_t file_size,
              std::vector<stoker::train::NamedTensor>& tensors,
              std::map<std::string, std::string>& metadata, bool& all_loaded) {
  all_loaded = true;
  using stoker::train::SafetensorsReader;
  std::unique_ptr<SafetensorsReader> reader;
  try {
    reader = std::make_unique<SafetensorsReader>(path);
  } catch (const stoker::Error&) {
    return false;
  }
  // Opened: the header was validated, so from here on nothing may fail.
  const SafetensorsReader& r = *reader;
  uint64_t header_len = 0;
  if (file != nullptr) std::memcpy(&header_len, file, 8);
  for (const std::string& name : r.names()) {
    const SafetensorsReader::Entry& e = r.entry(name);
    const std::string what = path.string() + ", tensor '" + name + "'";
    STOKER_FUZZ_EXPECT(e.begin <= e.end, what + ": begin after end");
    for (int d = 0; d < e.shape.rank(); ++d)
      STOKER_FUZZ_EXPECT(e.shape[d] >= 0, what + ": opened with shape " + e.shape.str());
    // A tensor that fails its stored checksum must fail to load (a stoker::Error); every other
    // one must load.
    const bool intact = r.check_checksum(name).ok();
    stoker::Tensor t;
    try {
      t = r.load(name);
    } catch (const stoker::Error& err) {
      STOKER_FUZZ_EXPECT(!intact, what + ": opened, but load throws: " + err.what());
      all_loaded = false;
      continue;
    }
    STOKER_FUZZ_EXPECT(intact, what + ": fails its checksum, but loads");
    STOKER_FUZZ_EXPECT(t.nbytes() == e.end - e.begin, what + ": loaded size differs");
    if (file != nullptr && t.nbytes() > 0) {
      STOKER_FUZZ_EXPECT(8 + header_len + e.end <= file_size, what + ": offsets beyond the file");
      STOKER_FUZZ_EXPECT(std::memcmp(t.data(), file + 8 + header_len + e.begin, t.nbytes()) == 0,
                         what + ": loaded bytes differ from the bytes at its offsets");
    }
    tensors.push_back({name, t});
  }
  metadata = r.metadata();
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fs::path& dir = scratch_dir("safetensors");
  const fs::path input = dir / "input.safetensors";
  write_input(input, data, size);

  std::vector<stoker::train::NamedTensor> tensors;
  std::map<std::string, std::string> metadata;
  bool all_loaded = false;
  const bool opened = load_all(input, data, size, tensors, metadata, all_loaded);
  STOKER_FUZZ_EXPECT(open_fds_under(dir).empty(), "left open: " + open_fds_under(dir));
  STOKER_FUZZ_EXPECT(mapped_under(dir).empty(), "left mapped: " + mapped_under(dir));
  if (!opened || !all_loaded) return 0;

  // Round trip through the writer (the writer refuses empty names, which the format allows). It
  // writes checksums of its own, replacing the input's.
  metadata.erase(stoker::train::kChecksumsKey);
  metadata.erase(stoker::train::kHeaderChecksumKey);
  metadata.erase(stoker::train::kSafetensorsVersionKey);
  bool writable = true;
  size_t total = 0;
  for (const auto& nt : tensors) {
    writable = writable && !nt.name.empty();
    total += nt.tensor.nbytes();
  }
  if (!writable || total > (size_t{1} << 20)) return 0;
  const fs::path copy = dir / "copy.safetensors";
  try {
    stoker::train::save_safetensors(copy, tensors, metadata);
  } catch (const stoker::Error& err) {
    STOKER_FUZZ_EXPECT(
        false, std::string("save_safetensors refuses what the reader loaded: ") + err.what());
  }
  std::vector<stoker::train::NamedTensor> again;
  std::map<std::string, std::string> metadata_again;
  bool all_loaded_again = false;
  STOKER_FUZZ_EXPECT(load_all(copy, nullptr, 0, again, metadata_again, all_loaded_again),
                     "the reader refuses what save_safetensors wrote");
  STOKER_FUZZ_EXPECT(all_loaded_again, "what save_safetensors wrote fails its checksums");
  metadata_again.erase(stoker::train::kChecksumsKey);
  metadata_again.erase(stoker::train::kHeaderChecksumKey);
  metadata_again.erase(stoker::train::kSafetensorsVersionKey);
  STOKER_FUZZ_EXPECT(metadata_again == metadata, "metadata changed in the round trip");
  std::map<std::string, const stoker::Tensor*> by_name;
  for (const auto& nt : again) by_name[nt.name] = &nt.tensor;
  STOKER_FUZZ_EXPECT(by_name.size() == tensors.size(), "tensor count changed in the round trip");
  for (const auto& nt : tensors) {
    const auto it = by_name.find(nt.name);
    STOKER_FUZZ_EXPECT(it != by_name.end(), "tensor '" + nt.name + "' lost in the round trip");
    const stoker::Tensor& b = *it->second;
    STOKER_FUZZ_EXPECT(
        b.dtype() == nt.tensor.dtype() && b.shape() == nt.tensor.shape() &&
            (b.nbytes() == 0 || std::memcmp(b.data(), nt.tensor.data(), b.nbytes()) == 0),
        "tensor '" + nt.name + "' changed in the round trip");
  }
  STOKER_FUZZ_EXPECT(open_fds_under(dir).empty(), "left open: " + open_fds_under(dir));
  STOKER_FUZZ_EXPECT(mapped_under(dir).empty(), "left mapped: " + mapped_under(dir));
  // The atomic save leaves its file and nothing else (no temporary file).
  for (const auto& e : fs::directory_iterator(dir)) {
    STOKER_FUZZ_EXPECT(e.path() == input || e.path() == copy,
                       "save_safetensors left " + e.path().string());
  }
  return 0;
}
