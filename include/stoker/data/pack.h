// Packing: JPEG images (a folder of class sub-folders, a list file, or the synthetic set) into
// the LMDB format that LmdbImageDataset reads (docs/formats.md). This is what `stoker pack`
// runs; it is public so that programs and tests can pack without the CLI.
//
// Every image is validated (header decode + full decompress with TurboJPEG); unreadable or
// corrupt files are reported on stderr by path, skipped and counted. Work runs on a oneTBB
// arena of `threads` threads, chunk by chunk; records are written in order with keys
// 0..samples-1. The database is built in "<out>.tmp-<pid>" and renamed to <out> only after its
// last transaction (which writes the format tag) is committed and synced: an interrupted pack
// never leaves a database at <out>, and the temporary folder never carries the format tag.
//
// Thread-safety: each call is independent; calls may run concurrently on different outputs.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace stoker::data {

struct PackOptions {
  int threads = 0;         // 0: all hardware threads
  int resize_shorter = 0;  // > 0: re-encode so the shorter side is at most this (never enlarges)
  int quality = 90;        // JPEG quality of re-encoded images
  // Rewrite each JPEG losslessly (the same DCT coefficients, hence the same pixels) as baseline
  // with Huffman tables fitted to it and restart markers that tile its MCU rows, so a crop
  // decodes only the tiles it covers (DecoderOptions::restart_tiles). Off: the bytes as given.
  bool restart_markers = true;
  bool shuffle = false;         // shuffle the samples once, at pack time
  uint64_t seed = 0;            // shuffle seed
  int64_t map_size_gib = 1024;  // LMDB map size (address space only; the file grows as written)
  bool overwrite = false;       // replace an existing database at the output path
  bool progress = true;         // progress bar on stderr (only when stderr is a terminal)
  bool report_skipped = true;   // one stderr line per skipped file
  // For tests: throw after this many samples were written (simulates a crash mid-pack).
  int64_t fail_after = -1;
};

struct PackSummary {
  int64_t samples = 0;  // records written
  int64_t classes = 0;
  int64_t bytes = 0;                        // payload bytes written
  int64_t skipped = 0;                      // unreadable or corrupt inputs
  std::vector<std::string> skipped_inputs;  // "path: reason"
  double seconds = 0;
  std::filesystem::path output;
};

// One input image: where it is and its label.
struct PackItem {
  std::string path;
  int32_t label = 0;
};

// Sub-folders of `root` (sorted by name) are the classes, label = position; every regular file
// below a class folder (recursively, sorted; hidden files ignored) is an input.
PackSummary pack_folder(const std::filesystem::path& root, const std::filesystem::path& out,
                        const PackOptions& options);

// `list` has one "path label" line per image (paths relative to the list's folder unless
// absolute; '#' comments and blank lines ignored). Class names are "0".."max label".
PackSummary pack_list(const std::filesystem::path& list, const std::filesystem::path& out,
                      const PackOptions& options);

// Lower level: packs `items` with the given class names.
PackSummary pack_items(std::vector<PackItem> items, std::vector<std::string> class_names,
                       const std::filesystem::path& out, const PackOptions& options);

// Produces the encoded JPEG of sample i (and its label) or throws; used for generated data.
using SampleProducer = std::function<std::vector<uint8_t>(int64_t i, int32_t& label)>;

// Packs `count` generated samples (no validation or re-encoding: the producer is trusted).
PackSummary pack_generated(int64_t count, const SampleProducer& produce,
                           std::vector<std::string> class_names, const std::filesystem::path& out,
                           const PackOptions& options);

// Validates `jpeg` by decoding it fully; returns an empty string when it is a good JPEG,
// otherwise the reason. With resize_shorter > 0, `reencoded` receives the resized JPEG.
std::string validate_jpeg(const std::vector<uint8_t>& jpeg, int resize_shorter, int quality,
                          std::vector<uint8_t>* reencoded);

// Human-readable summary lines ("packed 60 samples of 3 classes ...").
std::string format_summary(const PackSummary& summary);

}  // namespace stoker::data
