// The packer. Inputs are processed in chunks: a chunk is read/validated/re-encoded in parallel
// on a oneTBB arena, then written in input order by this thread in one LMDB write transaction,
// so memory stays bounded and sample keys are dense (skipped inputs leave no holes).
//
// Atomicity: everything is written into "<out>.tmp-<pid>"; the format tag (which readers
// require) goes into the final transaction, then the environment is synced and closed and the
// folder renamed to <out>. Any exception removes the temporary folder.
#include "stoker/data/pack.h"

#include <fcntl.h>
#include <lmdb.h>
#include <unistd.h>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <numeric>
#include <sstream>
#include <thread>

#include "data/jpeg_restart.h"
#include "data/pack_jpeg.h"
#include "stoker/core/error.h"
#include "stoker/core/rng.h"
#include "stoker/data/record.h"
#include "util/progress_bar.h"

namespace stoker::data {

namespace fs = std::filesystem;
using core::detail::str;

namespace {

constexpr uint64_t kPackShuffleStream = 0x7061636B00000000ull;  // "pack"

void lmdb_check(int rc, const char* call, const fs::path& path) {
  if (rc == 0) return;
  core::detail::throw_error(
      __FILE__, __LINE__, str("LMDB ", call, " failed on ", path.string(), ": ", mdb_strerror(rc)),
      rc == MDB_MAP_FULL ? "the LMDB map is full: pack with a larger --map-size"
                         : "check free disk space and permissions of the output folder");
}

// The database under construction in its temporary folder.
class DbWriter {
 public:
  DbWriter(const fs::path& out_arg, const PackOptions& options) {
    STOKER_CHECK(!out_arg.empty(), "stoker pack: empty output path");
    // "db/" names the folder db: drop the trailing separator so the temporary folder is a
    // sibling ("db.tmp-<pid>"), not a child.
    const fs::path out = out_arg.has_filename() ? out_arg : out_arg.parent_path();
    out_ = out;
    std::error_code ec;
    if (fs::exists(out, ec) && !options.overwrite) {
      core::detail::throw_error(__FILE__, __LINE__,
                                str("stoker pack: output ", out.string(), " already exists"),
                                "pass --overwrite to replace it, or choose another --out");
    }
    const fs::path parent = fs::absolute(out).parent_path();
    fs::create_directories(parent, ec);
    STOKER_CHECK_HINT(!ec && fs::is_directory(parent), "choose an --out inside a writable folder",
                      "stoker pack: cannot create output folder ", parent.string(), ": ",
                      ec.message());
    tmp_ = out.string() + ".tmp-" + std::to_string(::getpid());
    fs::remove_all(tmp_, ec);
    fs::create_directory(tmp_, ec);
    STOKER_CHECK_HINT(!ec, "choose an --out inside a writable folder",
                      "stoker pack: cannot create ", tmp_.string(), ": ", ec.message());
    try {
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
    if (overwrite && fs::exists(out_, ec)) fs::remove_all(out_, ec);
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

// Makes the record of input i: returns "" and fills `record`, or the reason to skip it.
// Exceptions are fatal.
using RecordMaker = std::function<std::string(int64_t i, std::string& record, int64_t& payload)>;

PackSummary run_pack(int64_t count, const RecordMaker& make,
                     const std::function<std::string(int64_t)>& input_name,
                     std::vector<std::string> class_names, const fs::path& out,
                     const PackOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  STOKER_CHECK(!class_names.empty(), "stoker pack: no classes");
  for (const auto& name : class_names) {
    STOKER_CHECK(name.find('\n') == std::string::npos, "stoker pack: class name '", name,
                 "' contains a newline");
  }
  STOKER_CHECK(options.map_size_gib >= 1 && options.map_size_gib <= (int64_t{1} << 20),
               "stoker pack: --map-size ", options.map_size_gib, " GiB is not in [1, 2^20]");
  STOKER_CHECK(options.quality >= 1 && options.quality <= 100, "stoker pack: quality ",
               options.quality, " is not in [1, 100]");
  DbWriter db(out, options);
  const int threads = options.threads > 0
                          ? options.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  tbb::task_arena arena(threads);
  const int64_t chunk = std::max<int64_t>(64, 16 * threads);
  PackSummary summary;
  summary.output = out;
  summary.classes = static_cast<int64_t>(class_names.size());
  util::ProgressBar progress(options.progress);
  const auto progress_start = std::chrono::steady_clock::now();
  std::vector<std::string> records, errors;
  std::vector<int64_t> payloads;
  for (int64_t begin = 0; begin < count; begin += chunk) {
    const int64_t end = std::min(count, begin + chunk);
    const auto n = static_cast<size_t>(end - begin);
    records.assign(n, {});
    errors.assign(n, {});
    payloads.assign(n, 0);
    arena.execute([&] {
      tbb::parallel_for(tbb::blocked_range<int64_t>(begin, end, 1),
                        [&](const tbb::blocked_range<int64_t>& r) {
                          for (int64_t i = r.begin(); i < r.end(); ++i) {
                            const auto k = static_cast<size_t>(i - begin);
                            errors[k] = make(i, records[k], payloads[k]);
                          }
                        });
    });
    db.begin();
    for (size_t k = 0; k < n; ++k) {
      if (!errors[k].empty()) {
        const std::string line = input_name(begin + static_cast<int64_t>(k)) + ": " + errors[k];
        if (options.report_skipped) {
          std::fprintf(stderr, "%sskipped %s\n", progress.enabled() ? "\n" : "", line.c_str());
        }
        summary.skipped_inputs.push_back(line);
        ++summary.skipped;
        continue;
      }
      db.put(sample_key(summary.samples), records[k], MDB_APPEND);
      ++summary.samples;
      summary.bytes += payloads[k];
      if (options.fail_after >= 0 && summary.samples >= options.fail_after) {
        STOKER_THROW("stoker pack: injected failure after ", summary.samples, " samples");
      }
    }
    db.commit();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - progress_start).count();
    progress.draw("packing", end, count,
                  core::detail::str(" ", count > 0 ? 100 * end / count : 100, "% ",
                                    static_cast<int64_t>(s > 0 ? end / s : 0.0), " img/s"),
                  end == count);
  }
  progress.finish();
  STOKER_CHECK_HINT(summary.samples > 0, "check that the inputs are JPEG files",
                    "stoker pack: no valid image among ", count, " inputs (", summary.skipped,
                    " skipped); nothing written to ", out.string());
  db.finish(class_names, summary.samples, options.overwrite);
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

bool read_file(const std::string& path, std::vector<uint8_t>& bytes, std::string& error) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    error = str("cannot open: ", std::strerror(errno));
    return false;
  }
  f.seekg(0, std::ios::end);
  const std::streamoff size = f.tellg();
  f.seekg(0, std::ios::beg);
  if (size < 0) {
    error = "cannot read (not a regular file?)";
    return false;
  }
  bytes.resize(static_cast<size_t>(size));
  if (size > 0 && !f.read(reinterpret_cast<char*>(bytes.data()), size)) {
    error = "read error";
    return false;
  }
  return true;
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

bool hidden(const fs::path& p) { return !p.filename().empty() && p.filename().string()[0] == '.'; }

}  // namespace

std::string validate_jpeg(const std::vector<uint8_t>& jpeg, int resize_shorter, int quality,
                          std::vector<uint8_t>* reencoded) {
  detail::RgbImage image;
  std::string why = detail::decompress_rgb(jpeg.data(), jpeg.size(), image);
  if (!why.empty() || resize_shorter <= 0 || reencoded == nullptr) return why;
  const int shorter = std::min(image.width, image.height);
  if (shorter > resize_shorter) {
    const double s = static_cast<double>(resize_shorter) / shorter;
    int w = resize_shorter, h = resize_shorter;
    if (image.width > image.height) w = std::max(1, static_cast<int>(std::lround(image.width * s)));
    if (image.height > image.width)
      h = std::max(1, static_cast<int>(std::lround(image.height * s)));
    image = detail::resize_area(image, w, h);
  }
  *reencoded = detail::compress_rgb(image.pixels.data(), image.width, image.height, quality);
  return {};
}

PackSummary pack_items(std::vector<PackItem> items, std::vector<std::string> class_names,
                       const fs::path& out, const PackOptions& options) {
  STOKER_CHECK(!items.empty(), "stoker pack: no input images for ", out.string());
  for (const PackItem& item : items) {
    STOKER_CHECK(item.label >= 0 && item.label < static_cast<int32_t>(class_names.size()),
                 "stoker pack: ", item.path, " has label ", item.label, " outside [0, ",
                 class_names.size(), ")");
  }
  if (options.shuffle) {
    for (size_t i = items.size() - 1; i > 0; --i) {
      const core::Philox4 r = core::philox_block(options.seed, kPackShuffleStream, i);
      const uint64_t x = (static_cast<uint64_t>(r.v[0]) << 32) | r.v[1];
      std::swap(items[i], items[x % (i + 1)]);
    }
  }
  const RecordMaker make = [&](int64_t i, std::string& record, int64_t& payload) -> std::string {
    const PackItem& item = items[static_cast<size_t>(i)];
    std::vector<uint8_t> bytes;
    std::string error;
    if (!read_file(item.path, bytes, error)) return error;
    std::vector<uint8_t> reencoded, tiled;
    error = validate_jpeg(bytes, options.resize_shorter, options.quality,
                          options.resize_shorter > 0 ? &reencoded : nullptr);
    if (!error.empty()) return error;
    const std::vector<uint8_t>& payload_bytes =
        with_restart_markers(options.resize_shorter > 0 ? reencoded : bytes, options, tiled);
    record = encode_record(item.label, PayloadKind::jpeg, payload_bytes);
    payload = static_cast<int64_t>(payload_bytes.size());
    return {};
  };
  return run_pack(
      static_cast<int64_t>(items.size()), make,
      [&](int64_t i) { return items[static_cast<size_t>(i)].path; }, std::move(class_names), out,
      options);
}

PackSummary pack_generated(int64_t count, const SampleProducer& produce,
                           std::vector<std::string> class_names, const fs::path& out,
                           const PackOptions& options) {
  STOKER_CHECK(count > 0, "stoker pack: sample count ", count, " must be positive");
  const auto num_classes = static_cast<int32_t>(class_names.size());
  const RecordMaker make = [&](int64_t i, std::string& record, int64_t& payload) -> std::string {
    int32_t label = 0;
    const std::vector<uint8_t> jpeg = produce(i, label);
    STOKER_CHECK(label >= 0 && label < num_classes, "stoker pack: generated sample ", i,
                 " has label ", label, " outside [0, ", num_classes, ")");
    std::vector<uint8_t> tiled;
    const std::vector<uint8_t>& payload_bytes = with_restart_markers(jpeg, options, tiled);
    record = encode_record(label, PayloadKind::jpeg, payload_bytes);
    payload = static_cast<int64_t>(payload_bytes.size());
    return {};
  };
  return run_pack(
      count, make, [](int64_t i) { return str("sample ", i); }, std::move(class_names), out,
      options);
}

PackSummary pack_folder(const fs::path& root, const fs::path& out, const PackOptions& options) {
  std::error_code ec;
  STOKER_CHECK_HINT(fs::is_directory(root, ec),
                    "pass a folder with one sub-folder per class (or a list file of `path label` "
                    "lines)",
                    "stoker pack: ", root.string(), " is not a folder");
  std::vector<fs::path> class_dirs;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (entry.is_directory() && !hidden(entry.path())) class_dirs.push_back(entry.path());
  }
  std::sort(class_dirs.begin(), class_dirs.end());
  STOKER_CHECK_HINT(!class_dirs.empty(), "put each class's images in its own sub-folder",
                    "stoker pack: ", root.string(), " has no class sub-folders");
  std::vector<std::string> class_names;
  std::vector<PackItem> items;
  for (size_t c = 0; c < class_dirs.size(); ++c) {
    class_names.push_back(class_dirs[c].filename().string());
    std::vector<std::string> files;
    for (const auto& entry : fs::recursive_directory_iterator(class_dirs[c])) {
      if (!hidden(entry.path()) && !entry.is_directory()) files.push_back(entry.path().string());
    }
    std::sort(files.begin(), files.end());
    for (auto& f : files) items.push_back({std::move(f), static_cast<int32_t>(c)});
  }
  return pack_items(std::move(items), std::move(class_names), out, options);
}

PackSummary pack_list(const fs::path& list, const fs::path& out, const PackOptions& options) {
  std::ifstream f(list);
  STOKER_CHECK_HINT(static_cast<bool>(f), "pass a text file of `path label` lines",
                    "stoker pack: cannot open list file ", list.string(), ": ",
                    std::strerror(errno));
  const fs::path base = list.parent_path();
  std::vector<PackItem> items;
  int32_t max_label = -1;
  std::string line;
  for (int line_no = 1; std::getline(f, line); ++line_no) {
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    const auto last = line.find_last_not_of(" \t\r");
    line = line.substr(first, last - first + 1);
    const auto split = line.find_last_of(" \t");
    int32_t label = -1;
    const char* lb = split == std::string::npos ? nullptr : line.data() + split + 1;
    const auto parsed = lb ? std::from_chars(lb, line.data() + line.size(), label)
                           : std::from_chars_result{nullptr, std::errc::invalid_argument};
    STOKER_CHECK_HINT(
        lb && parsed.ec == std::errc() && parsed.ptr == line.data() + line.size() && label >= 0,
        "each line is `path label` with a label >= 0", "stoker pack: ", list.string(), ":", line_no,
        ": cannot parse '", line, "'");
    std::string path = line.substr(0, line.find_last_not_of(" \t", split) + 1);
    fs::path p(path);
    if (p.is_relative()) p = base / p;
    items.push_back({p.string(), label});
    max_label = std::max(max_label, label);
  }
  STOKER_CHECK(!items.empty(), "stoker pack: list file ", list.string(), " has no entries");
  std::vector<std::string> class_names;
  for (int32_t c = 0; c <= max_label; ++c) class_names.push_back(std::to_string(c));
  return pack_items(std::move(items), std::move(class_names), out, options);
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
  return buf;
}

}  // namespace stoker::data
