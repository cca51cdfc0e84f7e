// `stoker info FILE.safetensors [--verify]`: what a training checkpoint or a weights file holds,
// and whether its checksums hold. Private to the CLI; `stoker info` of a packed database is
// main.cpp's run_info.
//
// A checkpoint shows its position (step, epoch, batch, epoch progress), the run that wrote it
// (world size, batch size, seed, dataset), its tensors by kind and bytes, and its checksums; a
// weights file its tensors (dtypes, shapes, parameters). Opening the file checks the header
// checksum (SafetensorsReader); --verify also reads every tensor against its checksum and lists
// the bad ones. Exit status 1 for a damaged file (header or tensor) or one that is not
// safetensors, with `stoker: error:` naming the file.
//
// Thread-safety: call from the main thread.
#pragma once

#include <filesystem>

namespace stoker::cli {

// Whether `stoker info PATH` means a safetensors file: a regular file whose name ends in
// ".safetensors" or whose first bytes are a safetensors header (an 8-byte length that fits the
// file, then '{'). Folders, FIFOs and other non-regular files are not (nothing is opened then).
bool is_safetensors_file(const std::filesystem::path& path);

// Prints the description; returns the exit status (0, or 1 when --verify finds bad tensors).
// Throws stoker::Error for a file that cannot be read or whose header is damaged.
int run_info_safetensors(const std::filesystem::path& path, bool verify);

}  // namespace stoker::cli
