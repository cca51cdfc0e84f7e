// TokenDataset: mmap + Philox offsets. The offset of (epoch, i) uses its own Philox stream so
// it never correlates with the Sampler's or the augmentations' draws from the same seed.
#include "stoker/data/token_batches.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <cerrno>
#include <cstring>

#include "stoker/core/error.h"
#include "stoker/core/rng.h"

namespace stoker::data {

namespace {
constexpr uint64_t kTokenOffsetStream = 0x746F6B656E000000ull;  // "token"
}

TokenDataset::TokenDataset(std::filesystem::path path, TokenDatasetOptions options)
    : path_(std::move(path)), options_(options) {
  STOKER_CHECK(options_.token_bytes == 2 || options_.token_bytes == 4, "TokenDataset ",
               path_.string(), ": token_bytes ", options_.token_bytes, " must be 2 or 4");
  STOKER_CHECK(options_.context >= 1, "TokenDataset ", path_.string(), ": context ",
               options_.context, " must be positive");
  STOKER_CHECK(options_.dtype == DType::i64 || options_.dtype == DType::i32, "TokenDataset ",
               path_.string(), ": dtype ", dtype_name(options_.dtype), " must be i64 or i32");
  // O_NONBLOCK: a FIFO with no writer would block the open forever; it is refused below.
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  STOKER_CHECK_HINT(fd >= 0, "check the path; the file holds raw uint16/uint32 token ids",
                    "TokenDataset: cannot open ", path_.string(), ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    STOKER_THROW("TokenDataset: cannot stat ", path_.string(), ": ", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    core::detail::throw_error(
        __FILE__, __LINE__,
        fmt::format("TokenDataset: {} is not a regular file (a folder, FIFO, socket or device): "
                    "token files are read from regular files only",
                    path_.string()),
        "give the path of a file of raw uint16/uint32 token ids");
  }
  bytes_ = static_cast<size_t>(st.st_size);
  if (bytes_ % static_cast<size_t>(options_.token_bytes) != 0) {
    ::close(fd);
    core::detail::throw_error(
        __FILE__, __LINE__,
        fmt::format("TokenDataset: {} has {} bytes, not a multiple of token_bytes = {}",
                    path_.string(), bytes_, options_.token_bytes),
        "set token_bytes to the width the file was written with (2 for uint16, 4 for uint32)");
  }
  num_tokens_ = static_cast<int64_t>(bytes_ / static_cast<size_t>(options_.token_bytes));
  if (num_tokens_ < options_.context + 1) {
    ::close(fd);
    STOKER_THROW("TokenDataset: ", path_.string(), " holds ", num_tokens_,
                 " tokens, fewer than one window of context + 1 = ", options_.context + 1);
  }
  void* p = ::mmap(nullptr, bytes_, PROT_READ, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  STOKER_CHECK(p != MAP_FAILED, "TokenDataset: cannot mmap ", path_.string(), ": ",
               std::strerror(err));
  data_ = static_cast<const uint8_t*>(p);
  ::madvise(const_cast<uint8_t*>(data_), bytes_, MADV_RANDOM);
}

TokenDataset::~TokenDataset() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), bytes_);
}

uint32_t TokenDataset::token(int64_t pos) const {
  STOKER_CHECK(pos >= 0 && pos < num_tokens_, "TokenDataset ", path_.string(), ": position ", pos,
               " is not in [0, ", num_tokens_, ")");
  const uint8_t* p = data_ + static_cast<size_t>(pos) * static_cast<size_t>(options_.token_bytes);
  uint32_t v = 0;
  for (int b = 0; b < options_.token_bytes; ++b) v |= static_cast<uint32_t>(p[b]) << (8 * b);
  return v;
}

int64_t TokenDataset::offset(int64_t epoch, int64_t i) const {
  STOKER_CHECK(epoch >= 0 && i >= 0, "TokenDataset::offset: epoch ", epoch, " and window ", i,
               " must be >= 0");
  const uint64_t range = static_cast<uint64_t>(num_tokens_ - options_.context);  // offsets
  const core::Philox4 r =
      core::philox_block(options_.seed, kTokenOffsetStream + epoch, static_cast<uint64_t>(i));
  const uint64_t x = (static_cast<uint64_t>(r.v[0]) << 32) | r.v[1];
  return static_cast<int64_t>(x % range);
}

TokenWindow TokenDataset::window(int64_t epoch, int64_t i) const {
  return window_at(offset(epoch, i));
}

TokenWindow TokenDataset::window_at(int64_t offset) const {
  const int64_t t = options_.context;
  STOKER_CHECK(offset >= 0 && offset + t + 1 <= num_tokens_, "TokenDataset ", path_.string(),
               ": window at ", offset, " of ", t + 1, " tokens runs past the ", num_tokens_,
               " tokens of the file");
  TokenWindow w;
  w.offset = offset;
  w.input = Tensor::empty(Shape{t}, options_.dtype);
  w.target = Tensor::empty(Shape{t}, options_.dtype);
  const bool wide = options_.dtype == DType::i64;
  auto* in64 = wide ? w.input.data<int64_t>() : nullptr;
  auto* tg64 = wide ? w.target.data<int64_t>() : nullptr;
  auto* in32 = wide ? nullptr : w.input.data<int32_t>();
  auto* tg32 = wide ? nullptr : w.target.data<int32_t>();
  for (int64_t k = 0; k <= t; ++k) {
    const uint32_t v = token(offset + k);
    if (options_.vocab_size > 0 && v >= static_cast<uint64_t>(options_.vocab_size)) {
      STOKER_THROW("TokenDataset ", path_.string(), ": token ", v, " at position ", offset + k,
                   " is not below vocab_size ", options_.vocab_size,
                   " (wrong token_bytes or vocabulary?)");
    }
    if (wide) {
      if (k < t) in64[k] = v;
      if (k > 0) tg64[k - 1] = v;
    } else {
      if (k < t) in32[k] = static_cast<int32_t>(v);
      if (k > 0) tg32[k - 1] = static_cast<int32_t>(v);
    }
  }
  return w;
}

}  // namespace stoker::data
