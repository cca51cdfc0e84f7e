// The packer. Inputs are processed in chunks: a chunk is read/validated/re-encoded in parallel
// on a oneTBB arena, then written in input order by this thread in one LMDB write transaction,
// so memory stays bounded and sample keys are dense (skipped inputs leave no holes).
//
// Atomicity: everything is written into "<out>.tmp-<pid>"; the format tag (which readers
// require) goes into the final transaction, then the environment is synced and closed and the
// folder renamed to <out>. Any exception, and SIGINT/SIGTERM (polled between chunks), removes
// the temporary folder.
//
// Robustness: each input is handled inside its own try block (out of memory on one input is a
// skip naming it, not the end of the pack); inputs are read through read_input_file (regular
// files only) and the folder walk never follows a directory link, so no input can block the
// pack or send it round a loop.
#include "stoker/data/pack.h"

#include <fcntl.h>
#include <lmdb.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <fmt/format.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <new>
#include <set>
#include <thread>

#include "data/exif_orientation.h"
#include "data/jpeg_restart.h"
#include "data/pack_input.h"
#include "data/pack_internal.h"
#include "data/pack_interrupt.h"
#include "data/pack_jpeg.h"
#include "data/pack_output.h"
#include "stoker/core/error.h"
#include "stoker/core/rng.h"
#include "stoker/data/lmdb_dataset.h"
#include "util/progress_bar.h"

namespace stoker::data {

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kPackShuffleStream = 0x7061636B00000000ull;  // "pack"

void lmdb_check(int rc, const char* call, const fs::path& path) {
  if (rc == 0) return;
  core::detail::throw_error(
      __FILE__, __LINE__,
      fmt::format("LMDB {} failed on {}: {}", call, path.string(), mdb_strerror(rc)),
      rc == MDB_MAP_FULL ? "the LMDB map is full: pack with a larger --map-size"
                         : "check free disk space and permissions of the output folder");
}

// Prints a line of the pack's report on stderr (after a newline when the progress bar is on).
void say(const PackOptions& options, bool progress_drawn, const char* what,
         const std::string& line) {
  if (!options.report_skipped) return;
  std::fprintf(stderr, "%s%s%s\n", progress_drawn ? "\n" : "", what, line.c_str());
}

// The database under construction in its temporary folder.
class DbWriter {
 public:
  DbWriter(const fs::path& out_arg, const PackOptions& options,
           std::vector<std::string>& warnings) {
    STOKER_CHECK(!out_arg.empty(), "stoker pack: empty output path");
    // "db/" names the folder db: drop the trailing separator so the temporary folder is a
    // sibling ("db.tmp-<pid>"), not a child.
    const fs::path out = out_arg.has_filename() ? out_arg : out_arg.parent_path();
    out_ = out;
    std::error_code ec;
    detail::check_output_replaceable(out, options.overwrite);
    const fs::path parent = fs::absolute(out).parent_path();
    fs::create_directories(parent, ec);
    STOKER_CHECK_HINT(!ec && fs::is_directory(parent), "choose an --out inside a writable folder",
                      "stoker pack: cannot create output folder ", parent.string(), ": ",
                      ec.message());
    for (std::string& line : detail::remove_stale_leftovers(out)) {
      say(options, false, "stoker pack: ", line);
      warnings.push_back(std::move(line));
    }
    tmp_ = out.string() + ".tmp-" + std::to_string(::getpid());
    fs::remove_all(tmp_, ec);
    fs::create_directory(tmp_, ec);
    STOKER_CHECK_HINT(!ec, "choose an --out inside a writable folder",
                      "stoker pack: cannot create ", tmp_.string(), ": ", ec.message());
    try {
      std::ofstream(tmp_ / detail::kPackOwnerFile) << detail::host_name() << '\n';
      // The map is address space only, but address space can be short (ulimit -v, a
      // sanitizer's shadow memory): on ENOMEM halve it, down to 1 GiB; a dataset larger than
      // the map that fits then stops with MDB_MAP_FULL and its hint.
      size_t map = static_cast<size_t>(options.map_size_gib) << 30;
      for (;;) {
        lmdb_check(mdb_env_create(&env_), "mdb_env_create", tmp_);
        lmdb_check(mdb_env_set_mapsize(env_, map), "mdb_env_set_mapsize", tmp_);
        const int rc = mdb_env_open(env_, tmp_.c_str(), MDB_NOSYNC, 0644);
        if (rc == 0) break;
        mdb_env_close(env_);  // a failed open leaves the handle unusable
        env_ = nullptr;
        if (rc != ENOMEM || map <= (size_t{1} << 30)) lmdb_check(rc, "mdb_env_open", tmp_);
        map /= 2;
      }
      MDB_txn* txn = nullptr;
      lmdb_check(mdb_txn_begin(env_, nullptr, 0, &txn), "mdb_txn_begin", tmp_);
      const int rc = mdb_dbi_open(txn, nullptr, 0, &dbi_);
      if (rc == 0) {
        lmdb_check(mdb_txn_commit(txn), "mdb_txn_commit", tmp_);
      } else {
        mdb_txn_abort(txn);
        lmdb_check(rc, "mdb_dbi_open", tmp_);
      }
    } catch (...) {
      discard();
      throw;
    }
  }

  ~DbWriter() { discard(); }

  const fs::path& out() const { return out_; }

  void begin() { lmdb_check(mdb_txn_begin(env_, nullptr, 0, &txn_), "mdb_txn_begin", tmp_); }

  void put(const std::string& key, const std::string& value, unsigned flags) {
    MDB_val k{key.size(), const_cast<char*>(key.data())};
    MDB_val v{value.size(), const_cast<char*>(value.data())};
    lmdb_check(mdb_put(txn_, dbi_, &k, &v, flags), "mdb_put", tmp_);
  }

  void commit() {
    MDB_txn* txn = txn_;
    txn_ = nullptr;
    lmdb_check(mdb_txn_commit(txn), "mdb_txn_commit", tmp_);
  }

  // Writes the metadata last, syncs, closes and renames the folder into place.
  void finish(const std::vector<std::string>& class_names, int64_t samples, bool overwrite) {
    std::string classes;
    for (size_t c = 0; c < class_names.size(); ++c) {
      if (c > 0) classes += '\n';
      classes += class_names[c];
    }
    begin();
    put(kMetaClassesKey, classes, 0);
    put(kMetaSamplesKey, std::to_string(samples), 0);
    put(kMetaFormatKey, kImageFormatTag, 0);
    commit();
    lmdb_check(mdb_env_sync(env_, 1), "mdb_env_sync", tmp_);
    mdb_env_close(env_);
    env_ = nullptr;
    std::error_code ec;
    fs::remove(tmp_ / detail::kPackOwnerFile, ec);  // the database is LMDB's two files only
    // Checked again now (the pack may have run for hours): only a stoker database goes.
    if (overwrite && fs::symlink_status(out_, ec).type() != fs::file_type::not_found) {
      detail::remove_stoker_database(out_);
    }
    fs::rename(tmp_, out_, ec);
    STOKER_CHECK_HINT(!ec, "remove the existing output or choose another --out",
                      "stoker pack: cannot rename ", tmp_.string(), " to ", out_.string(), ": ",
                      ec.message());
    const int dir = ::open(fs::absolute(out_).parent_path().c_str(), O_RDONLY | O_DIRECTORY);
    if (dir >= 0) {
      ::fsync(dir);
      ::close(dir);
    }
    tmp_.clear();
  }

 private:
  void discard() {
    if (txn_ != nullptr) mdb_txn_abort(txn_);
    txn_ = nullptr;
    if (env_ != nullptr) mdb_env_close(env_);
    env_ = nullptr;
    if (!tmp_.empty()) {
      std::error_code ec;
      fs::remove_all(tmp_, ec);
    }
  }

  fs::path out_, tmp_;
  MDB_env* env_ = nullptr;
  MDB_txn* txn_ = nullptr;
  MDB_dbi dbi_ = 0;
};

// What making the record of one input produced.
struct Made {
  std::string error;  // non-empty: skip the input for this reason
  std::string record;
  int64_t payload = 0;
  bool exif_rotated = false;
  std::string exif_malformed;  // why its Exif orientation could not be read
};

// Makes the record of input i into `made`. Exceptions are fatal (pack_items catches its own).
using RecordMaker = std::function<void(int64_t i, Made& made)>;

[[noreturn]] void throw_interrupted(int signal, const fs::path& out) {
  const std::string name = detail::signal_name(signal);
  throw PackInterrupted(signal,
                        fmt::format("stoker pack: interrupted by {}: nothing written to {} (its "
                                    "temporary folder was removed)",
                                    name, out.string()),
                        core::detail::where(__FILE__, __LINE__));
}

PackSummary run_pack(int64_t count, const RecordMaker& make,
                     const std::function<std::string(int64_t)>& input_name,
                     std::vector<std::string> class_names, const fs::path& out,
                     const PackOptions& options, detail::PackPrelude prelude) {
  const auto start = std::chrono::steady_clock::now();
  detail::check_pack_options(options);
  STOKER_CHECK(!class_names.empty(), "stoker pack: no classes");
  for (const auto& name : class_names) {
    STOKER_CHECK(name.find('\n') == std::string::npos, "stoker pack: class name '", name,
                 "' contains a newline");
  }
  PackSummary summary;
  summary.output = out;
  summary.classes = static_cast<int64_t>(class_names.size());
  for (std::string& line : prelude.warnings) {
    say(options, false, "stoker pack: warning: ", line);
    summary.warnings.push_back(std::move(line));
  }
  const auto found_skipped = static_cast<int64_t>(prelude.skipped.size());
  for (std::string& line : prelude.skipped) {
    say(options, false, "skipped ", line);
    summary.skipped_inputs.push_back(std::move(line));
    ++summary.skipped;
  }
  // Installed before the temporary folder exists and removed after it is gone (or renamed): a
  // signal in between always finds the flag, never the default action.
  detail::InterruptGuard interrupt_guard;
  DbWriter db(out, options, summary.warnings);
  const int threads = options.threads > 0
                          ? options.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  tbb::task_arena arena(threads);
  const int64_t chunk = std::max<int64_t>(64, 16 * threads);
  util::ProgressBar progress(options.progress);
  const auto progress_start = std::chrono::steady_clock::now();
  std::vector<Made> made;
  for (int64_t begin = 0; begin < count; begin += chunk) {
    if (const int sig = detail::InterruptGuard::signal()) throw_interrupted(sig, db.out());
    const int64_t end = std::min(count, begin + chunk);
    const auto n = static_cast<size_t>(end - begin);
    made.assign(n, {});
    arena.execute([&] {
      tbb::parallel_for(tbb::blocked_range<int64_t>(begin, end, 1),
                        [&](const tbb::blocked_range<int64_t>& r) {
                          for (int64_t i = r.begin(); i < r.end(); ++i) {
                            make(i, made[static_cast<size_t>(i - begin)]);
                          }
                        });
    });
    if (const int sig = detail::InterruptGuard::signal()) throw_interrupted(sig, db.out());
    db.begin();
    for (size_t k = 0; k < n; ++k) {
      Made& m = made[k];
      if (!m.error.empty()) {
        const std::string line = input_name(begin + static_cast<int64_t>(k)) + ": " + m.error;
        say(options, progress.enabled(), "skipped ", line);
        summary.skipped_inputs.push_back(line);
        ++summary.skipped;
        continue;
      }
      if (!m.exif_malformed.empty()) {
        const std::string line = input_name(begin + static_cast<int64_t>(k)) + ": " +
                                 m.exif_malformed + "; packed as stored (unrotated)";
        say(options, progress.enabled(), "stoker pack: warning: ", line);
        summary.warnings.push_back(line);
        ++summary.exif_unreadable;
      }
      summary.exif_rotated += m.exif_rotated ? 1 : 0;
      try {
        db.put(sample_key(summary.samples), m.record, MDB_APPEND);
      } catch (const Error& e) {
        core::detail::throw_error(
            __FILE__, __LINE__,
            fmt::format("{} (writing sample {}, {})", e.message(), summary.samples,
                        input_name(begin + static_cast<int64_t>(k))),
            e.hint());
      }
      ++summary.samples;
      summary.bytes += m.payload;
      m = Made{};  // the record's memory goes back now, not at the next chunk
      if (options.fail_after >= 0 && summary.samples >= options.fail_after) {
        STOKER_THROW("stoker pack: injected failure after ", summary.samples, " samples");
      }
    }
    db.commit();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - progress_start).count();
    progress.draw("packing", end, count,
                  fmt::format(" {}% {} img/s", count > 0 ? 100 * end / count : 100,
                              static_cast<int64_t>(s > 0 ? end / s : 0.0)),
                  end == count);
  }
  progress.finish();
  STOKER_CHECK_HINT(summary.samples > 0, "check that the inputs are JPEG files",
                    "stoker pack: no valid image among ", count + found_skipped, " inputs (",
                    summary.skipped, " skipped); nothing written to ", out.string());
  db.finish(class_names, summary.samples, options.overwrite);
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

// The payload to store: `jpeg` rewritten with restart markers into `scratch` when the options
// ask for it, else (or if the rewrite fails, which a validated JPEG should not) `jpeg` itself.
const std::vector<uint8_t>& with_restart_markers(const std::vector<uint8_t>& jpeg,
                                                 const PackOptions& options,
                                                 std::vector<uint8_t>& scratch) {
  if (!options.restart_markers) return jpeg;
  if (!detail::add_restart_markers(jpeg, scratch).empty()) return jpeg;
  return scratch;
}

// Shrinks `image` so its shorter side is `shorter` (never enlarges).
void shrink_to(Image& image, int shorter) {
  const int side = std::min(image.width, image.height);
  if (shorter <= 0 || side <= shorter) return;
  const double s = static_cast<double>(shorter) / side;
  int w = shorter, h = shorter;
  if (image.width > image.height) w = std::max(1, static_cast<int>(std::lround(image.width * s)));
  if (image.height > image.width) h = std::max(1, static_cast<int>(std::lround(image.height * s)));
  image = detail::resize_area(image, w, h);
}

// Reads, validates and (when asked) re-encodes one input into `made`.
void make_input_record(const PackItem& item, const PackOptions& options, Made& made) {
  std::vector<uint8_t> bytes;
  // The first bytes and the size are judged before the file is read whole: memory per thread
  // stays within what a JPEG within the pixel budget can take.
  made.error =
      detail::read_input_file(item.path, bytes, [&](uint64_t size, std::span<const uint8_t> head) {
        return detail::check_jpeg_head(size, head, options.max_pixels);
      });
  if (!made.error.empty()) return;
  Image image;
  made.error = detail::decode_rgb(bytes, options.max_pixels, image);
  if (!made.error.empty()) return;
  int orientation = 1;
  if (options.apply_exif_orientation) {
    detail::ExifOrientation exif = detail::read_exif_orientation(bytes);
    made.exif_malformed = std::move(exif.malformed);
    orientation = exif.value;
  }
  std::vector<uint8_t> reencoded, tiled;
  const bool reencode = options.resize_shorter > 0 || orientation != 1;
  if (reencode) {
    if (orientation != 1) image = detail::apply_orientation(image, orientation);
    shrink_to(image, options.resize_shorter);
    reencoded =
        detail::compress_rgb(image.pixels.data(), image.width, image.height, options.quality);
    made.exif_rotated = orientation != 1;
  }
  image = Image{};
  const std::vector<uint8_t>& payload_bytes =
      with_restart_markers(reencode ? reencoded : bytes, options, tiled);
  made.record = encode_record(item.label, PayloadKind::jpeg, payload_bytes);
  made.payload = static_cast<int64_t>(payload_bytes.size());
}

bool hidden(const fs::path& p) { return !p.filename().empty() && p.filename().string()[0] == '.'; }

// The inputs below class folder `dir`: every non-hidden entry that is not a real directory
// (regular files, and anything else for read_input_file to name and skip), sorted. Directory
// links are not followed (no loops through them); a folder reached twice (a bind mount) is
// walked once. Folders that cannot be listed are reported in `skipped`.
void walk_class_folder(const fs::path& dir, std::vector<std::string>& files,
                       std::vector<std::string>& skipped) {
  std::set<std::pair<dev_t, ino_t>> seen;
  std::vector<fs::path> pending{dir};
  while (!pending.empty()) {
    const fs::path folder = std::move(pending.back());
    pending.pop_back();
    struct stat st {};
    if (::stat(folder.c_str(), &st) == 0 && !seen.insert({st.st_dev, st.st_ino}).second) continue;
    std::error_code ec;
    fs::directory_iterator it(folder, ec), end;
    for (; !ec && it != end; it.increment(ec)) {
      const fs::path& path = it->path();
      std::error_code type_ec;
      const fs::file_status link = it->symlink_status(type_ec);
      if (!type_ec && fs::is_directory(link)) {
        pending.push_back(path);  // hidden folders too, as before: only hidden files are ignored
      } else if (!hidden(path)) {
        files.push_back(path.string());
      }
    }
    if (ec)
      skipped.push_back(
          fmt::format("{}: cannot list the folder: {}", folder.string(), ec.message()));
  }
  std::sort(files.begin(), files.end());
}

}  // namespace

namespace detail {

void check_pack_options(const PackOptions& o) {
  STOKER_CHECK_HINT(o.threads >= 0, "pass -j 0 for all cores, or a positive thread count",
                    "stoker pack: --threads ", o.threads,
                    " is negative (valid: 0 = all cores, or "
                    "a thread count >= 1)");
  STOKER_CHECK_HINT(o.resize_shorter >= 0, "pass --resize 0 to keep the images' size",
                    "stoker pack: --resize ", o.resize_shorter,
                    " is negative (valid: 0 = keep the size, or a shorter side >= 1 pixel)");
  STOKER_CHECK(o.quality >= 1 && o.quality <= 100, "stoker pack: --quality ", o.quality,
               " is not in [1, 100]");
  STOKER_CHECK(o.map_size_gib >= 1 && o.map_size_gib <= (int64_t{1} << 20),
               "stoker pack: --map-size ", o.map_size_gib, " GiB is not in [1, 2^20]");
  STOKER_CHECK(o.max_pixels >= 1, "stoker pack: --max-pixels ", o.max_pixels,
               " is not >= 1 (the default is 16384 x 16384 = 268435456, the loader's)");
  STOKER_CHECK(o.classes >= 0 && o.classes <= kPackMaxClasses, "stoker pack: --classes ", o.classes,
               " is not in [0, ", kPackMaxClasses, "] (0: inferred from the labels)");
}

PackSummary pack_items(std::vector<PackItem> items, std::vector<std::string> class_names,
                       const fs::path& out, const PackOptions& options, PackPrelude prelude) {
  check_pack_options(options);
  STOKER_CHECK(!items.empty() || !prelude.skipped.empty(), "stoker pack: no input images for ",
               out.string());
  for (const PackItem& item : items) {
    STOKER_CHECK(item.label >= 0 && item.label < static_cast<int32_t>(class_names.size()),
                 "stoker pack: ", item.path, " has label ", item.label, " outside [0, ",
                 class_names.size(), ")");
  }
  // Before any work: --out is none of the inputs, and what is there may be replaced.
  std::vector<PackInput> inputs = std::move(prelude.inputs);
  if (!prelude.inputs_cover_items) {
    std::set<std::string> folders;
    for (const PackItem& item : items) folders.insert(fs::path(item.path).parent_path().string());
    for (const std::string& f : folders) {
      inputs.push_back(
          {f.empty() ? fs::path(".") : fs::path(f), "the folder of the input image", true});
    }
  }
  check_output_apart_from_inputs(out, inputs);
  check_output_replaceable(out.has_filename() ? out : out.parent_path(), options.overwrite);
  if (options.shuffle && items.size() > 1) {
    for (size_t i = items.size() - 1; i > 0; --i) {
      const core::Philox4 r = core::philox_block(options.seed, kPackShuffleStream, i);
      const uint64_t x = (static_cast<uint64_t>(r.v[0]) << 32) | r.v[1];
      std::swap(items[i], items[x % (i + 1)]);
    }
  }
  const RecordMaker make = [&](int64_t i, Made& made) {
    if (InterruptGuard::signal() != 0) return;  // the chunk is dropped: stop working at once
    const PackItem& item = items[static_cast<size_t>(i)];
    // One input's failure, whatever it is, is that input's skip: never the pack's end.
    try {
      make_input_record(item, options, made);
    } catch (const std::bad_alloc&) {
      made = Made{};
      made.error = "out of memory while packing it (std::bad_alloc)";
    } catch (const Error& e) {
      made = Made{};
      made.error = e.message();
    } catch (const std::exception& e) {
      made = Made{};
      made.error = e.what();
    }
  };
  return run_pack(
      static_cast<int64_t>(items.size()), make,
      [&](int64_t i) { return items[static_cast<size_t>(i)].path; }, std::move(class_names), out,
      options, std::move(prelude));
}

}  // namespace detail

std::string validate_jpeg(const std::vector<uint8_t>& jpeg, int resize_shorter, int quality,
                          std::vector<uint8_t>* reencoded, int64_t max_pixels) {
  Image image;
  std::string why = detail::decode_rgb(jpeg, max_pixels, image);
  if (!why.empty() || resize_shorter <= 0 || reencoded == nullptr) return why;
  shrink_to(image, resize_shorter);
  *reencoded = detail::compress_rgb(image.pixels.data(), image.width, image.height, quality);
  return {};
}

PackSummary pack_items(std::vector<PackItem> items, std::vector<std::string> class_names,
                       const fs::path& out, const PackOptions& options) {
  return detail::pack_items(std::move(items), std::move(class_names), out, options, {});
}

PackSummary pack_generated(int64_t count, const SampleProducer& produce,
                           std::vector<std::string> class_names, const fs::path& out,
                           const PackOptions& options) {
  STOKER_CHECK(count > 0, "stoker pack: sample count ", count, " must be positive");
  const auto num_classes = static_cast<int32_t>(class_names.size());
  const RecordMaker make = [&](int64_t i, Made& made) {
    if (detail::InterruptGuard::signal() != 0) return;
    int32_t label = 0;
    const std::vector<uint8_t> jpeg = produce(i, label);
    STOKER_CHECK(label >= 0 && label < num_classes, "stoker pack: generated sample ", i,
                 " has label ", label, " outside [0, ", num_classes, ")");
    std::vector<uint8_t> tiled;
    const std::vector<uint8_t>& payload_bytes = with_restart_markers(jpeg, options, tiled);
    made.record = encode_record(label, PayloadKind::jpeg, payload_bytes);
    made.payload = static_cast<int64_t>(payload_bytes.size());
  };
  return run_pack(count, make, [](int64_t i) { return fmt::format("sample {}", i); },
                  std::move(class_names), out, options, {});
}

PackSummary pack_folder(const fs::path& root, const fs::path& out, const PackOptions& options) {
  detail::check_pack_options(options);
  std::error_code ec;
  STOKER_CHECK_HINT(fs::is_directory(root, ec),
                    "pass a folder with one sub-folder per class (or a list file of `path label` "
                    "lines)",
                    "stoker pack: ", root.string(), " is not a folder");
  detail::PackPrelude prelude;
  std::vector<fs::path> class_dirs;
  fs::directory_iterator it(root, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    if (hidden(it->path())) continue;
    // Class folders may be links to folders (followed: the walk below them follows none).
    std::error_code type_ec;
    const fs::file_status status = it->status(type_ec);
    if (fs::is_directory(status)) {
      class_dirs.push_back(it->path());
    } else if (type_ec) {  // a dangling link or a link loop where a class folder could be
      prelude.skipped.push_back(fmt::format("{}: not a class folder: {}", it->path().string(),
                                            type_ec == std::errc::too_many_symbolic_link_levels
                                                ? "symbolic link loop"
                                                : type_ec.message()));
    }
  }
  STOKER_CHECK_HINT(!ec, "check the folder's permissions", "stoker pack: cannot list ",
                    root.string(), ": ", ec.message());
  std::sort(class_dirs.begin(), class_dirs.end());
  STOKER_CHECK_HINT(!class_dirs.empty(), "put each class's images in its own sub-folder",
                    "stoker pack: ", root.string(), " has no class sub-folders");
  std::vector<std::string> class_names;
  std::vector<PackItem> items;
  for (size_t c = 0; c < class_dirs.size(); ++c) {
    class_names.push_back(class_dirs[c].filename().string());
    std::vector<std::string> files;
    walk_class_folder(class_dirs[c], files, prelude.skipped);
    for (auto& f : files) items.push_back({std::move(f), static_cast<int32_t>(c)});
  }
  prelude.inputs.push_back({root, "the input folder"});
  for (const fs::path& d : class_dirs) prelude.inputs.push_back({d, "the class folder"});
  prelude.inputs_cover_items = true;  // every item lies below a class folder
  return detail::pack_items(std::move(items), std::move(class_names), out, options,
                            std::move(prelude));
}

std::string format_summary(const PackSummary& s) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "packed %lld samples of %lld classes into %s\n"
                "  %.2f MiB of JPEG (%.1f KiB/sample), %lld skipped, %.2f s (%.0f samples/s)\n",
                static_cast<long long>(s.samples), static_cast<long long>(s.classes),
                s.output.string().c_str(), s.bytes / 1048576.0,
                s.samples > 0 ? s.bytes / 1024.0 / s.samples : 0.0,
                static_cast<long long>(s.skipped), s.seconds,
                s.seconds > 0 ? (s.samples + s.skipped) / s.seconds : 0.0);
  std::string text = buf;
  if (s.exif_rotated > 0 || s.exif_unreadable > 0) {
    text +=
        fmt::format("  Exif orientation: {} re-encoded upright, {} unreadable (packed unrotated)\n",
                    s.exif_rotated, s.exif_unreadable);
  }
  return text;
}

}  // namespace stoker::data
