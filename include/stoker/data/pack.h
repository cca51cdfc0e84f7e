// Packing: JPEG images (class sub-folders, a list file, or the synthetic set) into the LMDB
// format LmdbImageDataset reads — what `stoker pack` runs. Every input is decoded as the loader
// will; a bad one is reported, skipped and counted, never fatal. The database appears at <out>
// only when complete (built in "<out>.tmp-<pid>"; SIGINT/SIGTERM throw PackInterrupted).
// Thread-safety: calls may run concurrently on different outputs (a signal interrupts all).
// Details: docs/formats.md#image-dataset-lmdb-written-by-stoker-pack.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stoker/core/error.h"

namespace stoker::data {

// The largest class count a pack accepts (given with `classes` or inferred from the labels).
inline constexpr int64_t kPackMaxClasses = int64_t{1} << 20;

struct PackOptions {
  int threads = 0;         // >= 0; 0: all hardware threads
  int resize_shorter = 0;  // >= 0; > 0: re-encode so the shorter side is at most this (never
                           // enlarges); 0: keep the images' size
  int quality = 90;        // JPEG quality of re-encoded images, 1..100
  // Inputs whose header claims more pixels (width x height) are skipped before any pixel memory
  // is allocated: the loader's budget (DecoderOptions::max_pixels), so nothing packed is
  // refused by the loader's default decoder. >= 1.
  int64_t max_pixels = int64_t{16384} * 16384;
  // List files only: the number of classes, 0..kPackMaxClasses. 0: inferred as max label + 1
  // (a grossly sparse set of labels is then an error, a sparse one a warning: see pack_list).
  // N > 0: a label >= N is an error naming its line, and the dataset has N classes.
  int64_t classes = 0;
  // Rotate/flip each image upright as its Exif orientation tag (APP1, values 2..8) says, and
  // re-encode it at `quality` (without its Exif and other APPn markers). Off: the pixels are
  // stored as coded; the loader never applies Exif orientation (docs/data_loader.md).
  bool apply_exif_orientation = false;
  // Rewrite each JPEG losslessly (the same DCT coefficients, hence the same pixels) as baseline
  // with Huffman tables fitted to it and restart markers that tile its MCU rows, so a crop
  // decodes only the tiles it covers (DecoderOptions::restart_tiles). Off: the bytes as given.
  bool restart_markers = true;
  bool shuffle = false;         // shuffle the samples once, at pack time
  uint64_t seed = 0;            // shuffle seed
  int64_t map_size_gib = 1024;  // LMDB map size (address space only; the file grows as written)
  bool overwrite = false;       // replace an existing database at the output path
  bool progress = true;         // progress bar on stderr (only when stderr is a terminal)
  bool report_skipped = true;   // one stderr line per skipped file, warning and note
  // For tests: throw after this many samples were written (simulates a crash mid-pack).
  int64_t fail_after = -1;
};

struct PackSummary {
  int64_t samples = 0;  // records written
  int64_t classes = 0;
  int64_t bytes = 0;                        // payload bytes written
  int64_t skipped = 0;                      // unreadable or corrupt inputs
  std::vector<std::string> skipped_inputs;  // "path: reason"
  // With apply_exif_orientation: images re-encoded upright, and images whose Exif could not be
  // read (malformed APP1, an orientation outside 1..8), packed unrotated.
  int64_t exif_rotated = 0;
  int64_t exif_unreadable = 0;
  // What was worth saying but did not stop the pack (sparse labels, leftovers of interrupted
  // packs removed or left alone, unreadable Exif), as printed on stderr.
  std::vector<std::string> warnings;
  double seconds = 0;
  std::filesystem::path output;
};

// Thrown when SIGINT or SIGTERM stopped a pack; nothing was written to the output and the
// temporary folder was removed. The CLI exits with 128 + signal() (130, 143).
class PackInterrupted : public core::Error {
 public:
  PackInterrupted(int signal, std::string what, std::string where)
      : core::Error(std::move(what), std::move(where)), signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

// One input image: where it is and its label.
struct PackItem {
  std::string path;
  int32_t label = 0;
};

// Sub-folders of `root` (sorted by name; links to folders count) are the classes, label =
// position; every file below a class folder (recursively, sorted; hidden files ignored) is an
// input. Below a class folder, links to folders are not followed (each is a skipped input, as
// are FIFOs, sockets, dangling links and link loops); a dangling link or a link loop directly
// in `root` is a skipped input too.
PackSummary pack_folder(const std::filesystem::path& root, const std::filesystem::path& out,
                        const PackOptions& options);

// `list` has one "path label" line per image: the label is the last field (a decimal integer
// >= 0, separated by spaces or tabs), the path everything before it (it may contain spaces;
// relative paths are relative to the list's folder). '#' comments and blank lines are ignored;
// a UTF-8 byte-order mark at the start and CRLF line ends are accepted. Class names are
// "0".."N-1" with N = options.classes, or inferred as max label + 1 when it is 0: then a
// grossly sparse inference (over kPackMaxClasses classes, or over 1000 classes and over 10
// per distinct label: a label typo such as 1000000) is an error, and a sparse one (more than
// half of the classes without a sample) a warning naming the largest labels, their counts and
// lines. Both suggest --classes N.
PackSummary pack_list(const std::filesystem::path& list, const std::filesystem::path& out,
                      const PackOptions& options);

// Parses a list file's text: one "path label" line per image (see pack_list). Relative paths
// are joined to `base`. Throws stoker::Error naming `list_name` and the line on a bad line.
std::vector<PackItem> parse_list_file(std::string_view text, const std::filesystem::path& base,
                                      const std::string& list_name);

// Lower level: packs `items` with the given class names.
PackSummary pack_items(std::vector<PackItem> items, std::vector<std::string> class_names,
                       const std::filesystem::path& out, const PackOptions& options);

// Produces the encoded JPEG of sample i (and its label) or throws; used for generated data.
using SampleProducer = std::function<std::vector<uint8_t>(int64_t i, int32_t& label)>;

// Packs `count` generated samples (no validation or re-encoding: the producer is trusted).
PackSummary pack_generated(int64_t count, const SampleProducer& produce,
                           std::vector<std::string> class_names, const std::filesystem::path& out,
                           const PackOptions& options);

// Validates `jpeg` as the packer does (start markers, pixel budget from the header, then a full
// decode with the loader's decoder); returns an empty string when it is a good JPEG, otherwise
// the reason. With resize_shorter > 0, `reencoded` receives the resized JPEG (RGB).
std::string validate_jpeg(const std::vector<uint8_t>& jpeg, int resize_shorter, int quality,
                          std::vector<uint8_t>* reencoded,
                          int64_t max_pixels = int64_t{16384} * 16384);

// Human-readable summary lines ("packed 60 samples of 3 classes ...").
std::string format_summary(const PackSummary& summary);

}  // namespace stoker::data

// The synthetic image dataset: coloured shapes (circle, square, triangle, cross, ring, diamond,
namespace stoker::data {

inline constexpr int kSynthMaxClasses = 8;

struct SynthOptions {
  int64_t samples = 1000;
  int classes = 4;  // 2..kSynthMaxClasses
  int size = 32;    // square images of size x size pixels (>= 8)
  uint64_t seed = 0;
  int quality = 90;  // JPEG quality
};

// "circle", "square", ... (the first `classes` shape names).
std::vector<std::string> synth_class_names(int classes);

// RGB pixels (HWC, size * size * 3) of image `index`; its label goes to `label`.
std::vector<uint8_t> synth_image(const SynthOptions& options, int64_t index, int32_t& label);

// The same image compressed with TurboJPEG.
std::vector<uint8_t> synth_jpeg(const SynthOptions& options, int64_t index, int32_t& label);

// Packs the synthetic set into an LMDB database at `out`.
PackSummary pack_synth(const SynthOptions& synth, const std::filesystem::path& out,
                       const PackOptions& options);

// Writes the synthetic set as JPEG files: out/<class name>/<index>.jpg (for `stoker pack DIR`).
void write_synth_folder(const SynthOptions& synth, const std::filesystem::path& out);

}  // namespace stoker::data
