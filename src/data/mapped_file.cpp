// MappedFile (token_corpus_internal.h): a whole regular file mapped read-only. The file is
// checked with stat before it is opened, and opened with O_NONBLOCK, so a FIFO, socket or device
// is refused instead of blocking the process.
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "stoker/core/error.h"
#include "stoker/core/output_path.h"
#include "token_corpus_internal.h"

namespace stoker::data::detail {

MappedFile::MappedFile(std::filesystem::path path) : path_(std::move(path)) {
  core::check_input_file(path_, "token corpus");
  const int fd = core::open_input_file(path_, "token corpus");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    STOKER_THROW("token corpus: cannot stat ", path_.string(), ": ", std::strerror(err));
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    const int err = errno;
    if (p == MAP_FAILED) {
      ::close(fd);
      STOKER_THROW("token corpus: cannot map ", path_.string(), " (", size_,
                   " bytes): ", std::strerror(err));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

}  // namespace stoker::data::detail
