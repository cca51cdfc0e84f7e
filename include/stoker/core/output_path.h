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
// Thread-safety: thread-safe (the probe's name is unique per process and call).
#pragma once

#include <filesystem>
#include <string_view>

namespace stoker::core {

void check_output_path(const std::filesystem::path& path, std::string_view what);
void check_output_dir(const std::filesystem::path& dir, std::string_view what);

}  // namespace stoker::core
