// Early checks of output paths: a run that writes its results at the end (weights, the last
// checkpoint, a trace, a report) checks where they go before its first step, so that a typo or
// an unwritable place ends the run at once instead of losing hours of training at the end.
//
// check_output_path(path, what): `path` is a file to be written later. Its folder exists or is
//   created now (create_directories), is a folder, and a probe file can be created and removed
//   in it (the only test that also holds for root, whom permission bits do not stop); `path`
//   itself is not an existing folder.
// check_output_dir(dir, what): `dir` is a folder that files will be written into: it exists
//   or is created now, is a folder, and a probe file can be created and removed in it.
//
// `what` names the input in the error ("--save", "TrainerOptions::checkpoint_dir"); errors are
// stoker::Error with a message naming `what`, the path and the reason, and a hint on the fix.
// The checks leave the folders they created (the run writes into them later) and nothing else.
// A path that passes can still fail later (disk full, the folder removed meanwhile): the
// writers keep their own error handling.
//
// Inputs, which a program reads, are checked without opening them: reading a FIFO with no
// writer (or a terminal, a socket) blocks forever, so only regular files are read.
// check_input_file(path, what): `path` exists and is a regular file (after symlinks); a
//   folder, FIFO, socket or device is refused naming `what`, the path and what it is.
// check_input_folder(path, what, files): `path` exists and is a folder; each of `files` inside
//   it that exists is a regular file (a database folder's data.mdb).
// open_input_file(path, what): opens a regular file read-only without ever blocking (O_NONBLOCK,
//   then fstat on what was opened, then O_NONBLOCK cleared): the descriptor, or an error naming
//   `what`. For readers that must open what was checked earlier (the name may have changed).
// same_file(a, b): both name the same file or folder: the same st_dev/st_ino (through
//   symlinks, hard links and bind mounts), or, where one does not exist, the same path after
//   weakly_canonical.
//
// PathGuard: the inputs and outputs of one program, so that no output lands on an input. Each
// input is registered with input(); output() then refuses an output path that
//   - is an input (the same file, also through symlinks and hard links),
//   - lies inside an input folder (a database folder: `--save DB/data.mdb`),
//   - (an output folder) holds an input, at any depth, unless the input's name is in
//     `may_hold` (a checkpoint folder may hold the --resume file),
//   - is an output registered before (two outputs on one file),
// naming both flags and the paths, with a hint; nothing is created or opened. Call it before
// any work, and before check_output_path / check_output_dir create missing folders.
//
// Thread-safety: the functions are thread-safe (the probe's name is unique per process and
// call); a PathGuard belongs to one thread.
#pragma once

#include <filesystem>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace stoker::core {

void check_output_path(const std::filesystem::path& path, std::string_view what);
void check_output_dir(const std::filesystem::path& dir, std::string_view what);

void check_input_file(const std::filesystem::path& path, std::string_view what);
void check_input_folder(const std::filesystem::path& path, std::string_view what,
                        std::initializer_list<std::string_view> files = {});
int open_input_file(const std::filesystem::path& path, std::string_view what);
bool same_file(const std::filesystem::path& a, const std::filesystem::path& b);

class PathGuard {
 public:
  enum class Kind { file, folder };

  // An input the program reads (a file or a folder, as it is on disk); `what` names it in
  // errors ("--data"). An empty path is ignored.
  void input(std::string what, std::filesystem::path path);
  // Throws stoker::Error when output `path` of `kind` clashes with an input or an earlier
  // output (see above); otherwise registers it. An empty path is ignored.
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
