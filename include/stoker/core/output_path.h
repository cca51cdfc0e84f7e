// Early checks of a program's paths: outputs written at the end of a run are checked before its
// first step, inputs are checked without ever blocking, and PathGuard keeps outputs off inputs.
// Errors are stoker::Error naming `what` (the flag or option), the path, the reason and the fix.
// Thread-safety: the functions are thread-safe; a PathGuard belongs to one thread.
// Details: docs/reliability.md#how-the-code-holds-the-rule.
#pragma once

#include <filesystem>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace stoker::core {

// `path` is a file to be written later: its folder exists or is created now, is a folder, and a
// probe file can be created and removed in it (which also holds for root); `path` itself is not
// an existing folder. Created folders are left in place. A path that passes can still fail later
// (disk full): the writers keep their own error handling.
void check_output_path(const std::filesystem::path& path, std::string_view what);
// `dir` is a folder that files will be written into: it exists or is created now, is a folder,
// and a probe file can be created and removed in it.
void check_output_dir(const std::filesystem::path& dir, std::string_view what);

// Inputs are checked without being opened (reading a FIFO with no writer blocks forever).
// `path` exists and is a regular file (after symlinks); a folder, FIFO, socket or device is
// refused naming `what`, the path and what it is.
void check_input_file(const std::filesystem::path& path, std::string_view what);
// `path` exists and is a folder; each of `files` inside it that exists is a regular file (a
// database folder's data.mdb).
void check_input_folder(const std::filesystem::path& path, std::string_view what,
                        std::initializer_list<std::string_view> files = {});
// Opens a regular file read-only without ever blocking (O_NONBLOCK, fstat of what was opened,
// then O_NONBLOCK cleared): the descriptor, or an error naming `what`. For readers that must open
// what was checked earlier (the name may have changed).
int open_input_file(const std::filesystem::path& path, std::string_view what);
// Both name the same file or folder: the same st_dev/st_ino (through symlinks, hard links and
// bind mounts), or, where one does not exist, the same path after weakly_canonical.
bool same_file(const std::filesystem::path& a, const std::filesystem::path& b);

// The inputs and outputs of one program, so that no output lands on an input. Register every
// input, then each output before any work (and before check_output_path / check_output_dir
// create missing folders); nothing is created or opened.
class PathGuard {
 public:
  enum class Kind { file, folder };

  // An input the program reads (a file or a folder, as it is on disk); `what` names it in
  // errors ("--data"). An empty path is ignored.
  void input(std::string what, std::filesystem::path path);
  // Throws stoker::Error, naming both flags and the paths with a hint, when output `path` of
  // `kind` is an input (also through symlinks and hard links), lies inside an input folder, holds
  // an input at any depth (unless the input's name is in `may_hold`: a checkpoint folder may hold
  // the --resume file) or is an earlier output; otherwise registers it. An empty path is ignored.
  void output(std::string what, std::filesystem::path path, Kind kind,
              std::vector<std::string> may_hold = {});

 private:
  struct Entry {
    std::string what;
    std::filesystem::path path;      // as given
    std::filesystem::path resolved;  // absolute, weakly_canonical
    Kind kind;
  };
  std::vector<Entry> inputs_, outputs_;
};

}  // namespace stoker::core
