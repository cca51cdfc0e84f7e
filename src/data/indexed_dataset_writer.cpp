#include "data/indexed_dataset_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "stoker/core/error.h"
#include "util/atomic_file.h"
#include "util/checksum.h"

namespace stoker::data::detail {

namespace fs = std::filesystem;

namespace {

// A file written through a buffer, checksummed on the way.
class OutFile {
 public:
  explicit OutFile(fs::path path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    STOKER_CHECK_HINT(fd_ >= 0, "check free disk space and permissions of the --out folder",
                      "cannot create ", path_.string(), ": ", std::strerror(errno));
    buffer_.reserve(kBuffer);
  }
  ~OutFile() {
    if (fd_ >= 0) ::close(fd_);
  }

  void write(const void* data, size_t size) {
    checksum_.update(data, size);
    bytes_ += size;
    const auto* p = static_cast<const uint8_t*>(data);
    if (buffer_.size() + size > kBuffer) flush();
    if (size >= kBuffer) {
      util::write_all(fd_, p, size, path_);
    } else {
      buffer_.insert(buffer_.end(), p, p + size);
    }
  }
  template <typename T>
  void put(T value) {  // little-endian (the only byte order stoker builds for)
    write(&value, sizeof value);
  }

  void close() {
    flush();
    STOKER_CHECK_HINT(::fsync(fd_) == 0, "check free disk space of the --out folder", "fsync of ",
                      path_.string(), " failed: ", std::strerror(errno));
    const int fd = fd_;
    fd_ = -1;
    STOKER_CHECK_HINT(::close(fd) == 0, "check free disk space of the --out folder", "closing ",
                      path_.string(), " failed: ", std::strerror(errno));
  }

  uint64_t bytes() const { return bytes_; }
  uint64_t checksum() const { return checksum_.value(); }

 private:
  static constexpr size_t kBuffer = size_t{1} << 20;
  void flush() {
    if (!buffer_.empty()) util::write_all(fd_, buffer_.data(), buffer_.size(), path_);
    buffer_.clear();
  }

  fs::path path_;
  int fd_ = -1;
  std::vector<uint8_t> buffer_;
  util::Checksum64 checksum_;
  uint64_t bytes_ = 0;
};

}  // namespace

struct IndexedDatasetWriter::State {
  fs::path prefix;
  uint8_t dtype = kMegatronDtypeUint16;
  OutFile bin;
  std::vector<int32_t> lengths;
  std::vector<uint16_t> narrow;  // scratch for uint16 ids
  int64_t tokens = 0;
  State(const fs::path& p, uint8_t code)
      : prefix(p), dtype(code), bin(fs::path(p.string() + ".bin")) {}
};

IndexedDatasetWriter::IndexedDatasetWriter(const fs::path& prefix, uint8_t dtype_code) {
  STOKER_CHECK(dtype_code == kMegatronDtypeUint16 || dtype_code == kMegatronDtypeInt32,
               "indexed dataset writer: dtype code ", int{dtype_code},
               " is not uint16 (8) or int32 (4)");
  s_ = std::make_unique<State>(prefix, dtype_code);
}

IndexedDatasetWriter::~IndexedDatasetWriter() = default;

void IndexedDatasetWriter::add_document(std::span<const int32_t> ids) {
  STOKER_CHECK(!ids.empty(), "indexed dataset writer: empty document ", s_->lengths.size());
  STOKER_CHECK(ids.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()),
               "indexed dataset writer: document ", s_->lengths.size(), " has ", ids.size(),
               " tokens, more than an int32 sequence length can hold");
  if (s_->dtype == kMegatronDtypeUint16) {
    s_->narrow.resize(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      STOKER_CHECK(ids[i] >= 0 && ids[i] <= 0xFFFF, "indexed dataset writer: id ", ids[i],
                   " of document ", s_->lengths.size(), " does not fit uint16");
      s_->narrow[i] = static_cast<uint16_t>(ids[i]);
    }
    s_->bin.write(s_->narrow.data(), s_->narrow.size() * sizeof(uint16_t));
  } else {
    s_->bin.write(ids.data(), ids.size() * sizeof(int32_t));
  }
  s_->lengths.push_back(static_cast<int32_t>(ids.size()));
  s_->tokens += static_cast<int64_t>(ids.size());
}

IndexedDatasetFiles IndexedDatasetWriter::finish() {
  s_->bin.close();
  OutFile idx(fs::path(s_->prefix.string() + ".idx"));
  const auto count = static_cast<uint64_t>(s_->lengths.size());
  idx.write(kMegatronIndexMagic, sizeof kMegatronIndexMagic);
  idx.put<uint64_t>(1);  // version
  idx.put<uint8_t>(s_->dtype);
  idx.put<uint64_t>(count);      // sequences
  idx.put<uint64_t>(count + 1);  // document indices (one sequence per document, plus the 0)
  idx.write(s_->lengths.data(), s_->lengths.size() * sizeof(int32_t));
  const int64_t item = s_->dtype == kMegatronDtypeUint16 ? 2 : 4;
  int64_t pointer = 0;
  for (const int32_t length : s_->lengths) {
    idx.put<int64_t>(pointer);
    pointer += int64_t{length} * item;
  }
  for (uint64_t d = 0; d <= count; ++d) idx.put<int64_t>(static_cast<int64_t>(d));
  idx.close();
  IndexedDatasetFiles files;
  files.documents = static_cast<int64_t>(count);
  files.tokens = s_->tokens;
  files.bin_bytes = s_->bin.bytes();
  files.bin_checksum = s_->bin.checksum();
  files.idx_bytes = idx.bytes();
  files.idx_checksum = idx.checksum();
  return files;
}

}  // namespace stoker::data::detail
