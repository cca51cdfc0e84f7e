// stoker::core::Error and the check macros.
//
// Every failure a user can cause or meet (bad shapes, a missing file, a CUDA/NCCL/cuBLAS/cuDNN/
// LMDB error) is thrown as `stoker::Error`: what failed, where (file:line, and the device when
// known) and, when the fix is known, a hint. Library calls go through the STOKER_*_CHECK macros
// so that no return code is ever dropped. The macros take plain ints so this header needs no
// CUDA headers; the message lookup lives in src/core/error.cpp.
//
// Thread-safety: everything here is thread-safe.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace stoker::core {

class Error : public std::runtime_error {
 public:
  Error(std::string what, std::string where, std::string hint = {});

  // The failure alone, without location or hint.
  const std::string& message() const { return message_; }
  // "file.cpp:123" of the check that threw.
  const std::string& where() const { return where_; }
  // How to fix it, when known; empty otherwise.
  const std::string& hint() const { return hint_; }

 private:
  std::string message_;
  std::string where_;
  std::string hint_;
};

// Thrown when a device allocation fails; carries the requested bytes.
class OutOfMemoryError : public Error {
 public:
  OutOfMemoryError(std::string what, std::string where, std::string hint, size_t requested)
      : Error(std::move(what), std::move(where), std::move(hint)), requested_bytes(requested) {}
  size_t requested_bytes;
};

namespace detail {

// Internal to STOKER_CHECK, STOKER_CHECK_HINT and STOKER_THROW below: their message from the
// streamable pieces they take, STOKER_CHECK(c, "got ", n, " dims"). Code that builds a message
// of its own uses fmt::format.
template <typename... Args>
std::string macro_message(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

std::string where(const char* file, int line);
[[noreturn]] void throw_error(const char* file, int line, std::string what, std::string hint = {});

// Throws the Error of a failed library call: "<lib> call `<expr>` failed with status ...".
[[noreturn]] void library_error(const char* lib, const char* expr, int status, const char* msg,
                                const char* file, int line, std::string hint);

// Library status checks: return normally on success, throw a stoker::Error otherwise. Each is
// defined by the layer that links the library: check_cuda in core, check_cublas / check_cudnn in
// ops (stoker::ops), check_lmdb in data (stoker::data), check_nccl in dist (stoker::dist).
void check_cuda(int status, const char* expr, const char* file, int line);
void check_cublas(int status, const char* expr, const char* file, int line);
void check_cudnn(int status, const char* expr, const char* file, int line);
void check_nccl(int status, const char* expr, const char* file, int line);
void check_lmdb(int status, const char* expr, const char* file, int line);

}  // namespace detail
}  // namespace stoker::core

namespace stoker {
using core::Error;
using core::OutOfMemoryError;
}  // namespace stoker

// Guards user input: STOKER_CHECK(a.numel() == b.numel(), "add: sizes differ: ", a, " vs ", b).
#define STOKER_CHECK(cond, ...)                                                                \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      ::stoker::core::detail::throw_error(__FILE__, __LINE__,                                  \
                                          ::stoker::core::detail::macro_message(__VA_ARGS__)); \
    }                                                                                          \
  } while (0)

// Same with a hint on how to fix it.
#define STOKER_CHECK_HINT(cond, hint, ...)                                               \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      ::stoker::core::detail::throw_error(                                               \
          __FILE__, __LINE__, ::stoker::core::detail::macro_message(__VA_ARGS__), hint); \
    }                                                                                    \
  } while (0)

#define STOKER_THROW(...)                                 \
  ::stoker::core::detail::throw_error(__FILE__, __LINE__, \
                                      ::stoker::core::detail::macro_message(__VA_ARGS__))

#define STOKER_CUDA_CHECK(expr) \
  ::stoker::core::detail::check_cuda(static_cast<int>(expr), #expr, __FILE__, __LINE__)
#define STOKER_CUBLAS_CHECK(expr) \
  ::stoker::core::detail::check_cublas(static_cast<int>(expr), #expr, __FILE__, __LINE__)
#define STOKER_CUDNN_CHECK(expr) \
  ::stoker::core::detail::check_cudnn(static_cast<int>(expr), #expr, __FILE__, __LINE__)
#define STOKER_NCCL_CHECK(expr) \
  ::stoker::core::detail::check_nccl(static_cast<int>(expr), #expr, __FILE__, __LINE__)
#define STOKER_LMDB_CHECK(expr) \
  ::stoker::core::detail::check_lmdb(static_cast<int>(expr), #expr, __FILE__, __LINE__)
