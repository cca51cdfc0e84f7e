// Private: write a file so that readers see either the old or the complete new content.
//
// The bytes go to a temporary file in the same folder ("<name>.tmp.<pid>.<n>"), which is
// fsync'ed, renamed over the target, and the folder is fsync'ed so the rename survives a crash.
// On any failure the temporary file is removed and stoker::Error names the path and errno.
#pragma once

#include <filesystem>
#include <functional>

namespace stoker::util {

// `write(fd)` writes the content through `write_all`; it may throw.
void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(int fd)>& write);

// Writes all `size` bytes to fd or throws (naming `path`).
void write_all(int fd, const void* data, size_t size, const std::filesystem::path& path);

}  // namespace stoker::util
