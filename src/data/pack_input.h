// Private: reading one input of the packer (an image or a list file) without trusting what its
// path names. A path can name a directory, a FIFO (opening it for reading blocks until a writer
// appears: forever), a socket, a device, a dangling symbolic link or a link loop; each of those
// is refused with its name before any read, and a FIFO is never opened in blocking mode.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace stoker::data::detail {

// The largest input read: a record stores its payload's length in 32 bits.
inline constexpr uint64_t kMaxInputBytes = (uint64_t{1} << 32) - 64;

// "a directory", "a FIFO", "a socket", "a character device", ... for a stat() st_mode.
const char* file_type_name(mode_t mode);

// How much of a file the head check sees.
inline constexpr size_t kInputHeadBytes = 256 * 1024;

// A look at a file before it is read whole: its size and its first min(size, kInputHeadBytes)
// bytes. Returns "" to read the rest, or why not (the file is then skipped unread, so a 2 GB
// file that is not what it claims costs one small read, not 2 GB of memory).
using InputHeadCheck = std::function<std::string(uint64_t size, std::span<const uint8_t> head)>;

// Reads the regular file at `path` (symbolic links followed) into `bytes`. Returns "" or why it
// was not read: "not a regular file (a FIFO)", "dangling symbolic link to 'x' (...)", "symbolic
// link loop (...)", "cannot open: <strerror>", what `check_head` said, ... The file is checked
// with stat() first, then opened with O_NONBLOCK and checked again with fstat() on the
// descriptor (it may have been replaced in between).
std::string read_input_file(const std::string& path, std::vector<uint8_t>& bytes,
                            const InputHeadCheck& check_head = {});

}  // namespace stoker::data::detail
