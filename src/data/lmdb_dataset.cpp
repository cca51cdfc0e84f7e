// LmdbImageDataset: the data file's size (against the pages LMDB says are in use) and the
// metadata are validated once at open; per-sample checks live in parse_record so that read() and
// try_read() report exactly the same problems. Every LMDB call that may read a page of data.mdb
// runs under the fault guard (lmdb_fault_guard.h: LMDB trusts its pages, so a damaged one is a
// SIGBUS or an assertion, not an error code), and every value it returns is checked to lie inside
// the file before anyone reads it.
#include "stoker/data/lmdb_dataset.h"

#include <lmdb.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <fmt/format.h>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <thread>

#include "data/lmdb_fault_guard.h"
#include "stoker/core/error.h"

namespace stoker::data {

namespace {

constexpr const char* kRepackHint =
    "build the database with `stoker pack SOURCE --out DIR` (or `stoker pack synth --out DIR`)";
constexpr const char* kDamagedHint =
    "the file is truncated or damaged: copy it again or re-pack it (`stoker pack ...`)";

[[noreturn]] void fail(const char* file, int line, std::string what, std::string hint) {
  core::detail::throw_error(file, line, std::move(what), std::move(hint));
}

void lmdb_check(int rc, const char* call, const std::filesystem::path& path) {
  if (rc == 0) return;
  std::string hint;
  if (rc == ENOENT) hint = kRepackHint;
  if (rc == MDB_READERS_FULL)
    hint = "more Readers than reader slots: raise LmdbOptions::max_readers";
  if (rc == EACCES)
    hint =
        "the folder is read-only and holds no usable lock.mdb: copy the database to a folder "
        "you can write, or let its owner run `stoker info` on it once";
  fail(__FILE__, __LINE__,
       fmt::format("LMDB {} failed on {}: {}", call, path.string(), mdb_strerror(rc)), hint);
}

// What mdb_env_open says of a data file it cannot use as an environment: too small to hold
// LMDB's two meta pages, or not (or no longer) an LMDB file.
bool is_damaged_file_error(int rc) {
  return rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH || rc == MDB_CORRUPTED ||
         rc == MDB_PAGE_NOTFOUND;
}

// The result of a guarded lookup (guarded_get) that did not find a value.
constexpr int kDamaged = -1;  // LMDB's codes are errno values (> 0) and MDB_* (< -30000)

// Runs `call` (LMDB calls only, returning a status) under the fault guard: its status, or
// kDamaged with the reason in *why when a fault or an LMDB assertion stopped it.
template <typename F>
int guarded(F&& call, std::string* why) {
  int rc = 0;
  auto run = [&] { rc = call(); };
  if (!detail::lmdb_guarded(run, why)) return kDamaged;
  return rc;
}

// lmdb_check for a guarded call: a fault names the damage.
void guarded_check(int rc, const std::string& why, const char* call,
                   const std::filesystem::path& data_file) {
  if (rc == kDamaged) {
    fail(__FILE__, __LINE__,
         fmt::format("{} is damaged: a damaged page stopped LMDB's {} ({})", data_file.string(),
                     call, why),
         kDamagedHint);
  }
  lmdb_check(rc, call, data_file);
}

// Whether walking the tree of `dbi` (under the guard) yields as many entries as the meta page
// records; false, with the reason in *why, when a damaged page stops the walk or hides entries.
// Walks at most one entry more than the count.
bool tree_is_whole(MDB_txn* txn, MDB_dbi dbi, std::string* why) {
  MDB_stat stat{};
  int rc = guarded([&] { return mdb_stat(txn, dbi, &stat); }, why);
  MDB_cursor* cursor = nullptr;
  if (rc == 0) rc = guarded([&] { return mdb_cursor_open(txn, dbi, &cursor); }, why);
  size_t found = 0;
  bool out_of_order = false;  // an empty key, or keys not strictly ascending
  if (rc == 0) {
    // One guarded call per entry (each is stopped on its own if it loops), the key compared
    // inside it: a damaged page's key may point outside the file. C only in here (see
    // lmdb_fault_guard.h): the previous key in a plain buffer.
    char previous[512];
    size_t previous_size = 0;
    const auto step = [&](MDB_cursor_op op) {
      return guarded(
          [&] {
            MDB_val k{}, v{};
            const int r = mdb_cursor_get(cursor, &k, &v, op);
            if (r != 0) return r;
            const size_t common = std::min(previous_size, k.mv_size);
            const int order = found == 0 ? -1 : std::memcmp(previous, k.mv_data, common);
            if (k.mv_size == 0 || k.mv_size > sizeof previous || order > 0 ||
                (order == 0 && previous_size >= k.mv_size)) {
              out_of_order = true;
              return 0;
            }
            std::memcpy(previous, k.mv_data, k.mv_size);
            previous_size = k.mv_size;
            ++found;
            return 0;
          },
          why);
    };
    rc = step(MDB_FIRST);
    while (rc == 0 && !out_of_order && found <= stat.ms_entries) rc = step(MDB_NEXT);
    mdb_cursor_close(cursor);
    if (rc == MDB_NOTFOUND) rc = 0;  // the end of the tree
  }
  if (rc == kDamaged) return false;
  if (rc != 0) {
    *why = fmt::format("LMDB: {}", mdb_strerror(rc));
    return false;
  }
  if (out_of_order) {
    *why = fmt::format("after {} entries, the tree yields a key out of order", found);
    return false;
  }
  if (found != stat.ms_entries) {
    *why = found > stat.ms_entries
               ? fmt::format("the tree yields more entries than the {} its meta page records",
                             stat.ms_entries)
               : fmt::format("the tree yields {} of the {} entries its meta page records", found,
                             stat.ms_entries);
    return false;
  }
  return true;
}

// LMDB maps data.mdb and reads pages straight from the map: a page past the end of the file
// is a SIGBUS, not an error. So before anything reads a page, check that the file holds every
// page the newest meta page says is in use, and that the map covers them.
void check_pages_present(MDB_env* env, const std::filesystem::path& data_file,
                         uint64_t file_bytes) {
  MDB_envinfo info{};
  MDB_stat stat{};
  std::string why;
  guarded_check(guarded([&] { return mdb_env_info(env, &info); }, &why), why, "mdb_env_info",
                data_file);
  guarded_check(guarded([&] { return mdb_env_stat(env, &stat); }, &why), why, "mdb_env_stat",
                data_file);
  const uint64_t pages = static_cast<uint64_t>(info.me_last_pgno) + 1;
  const uint64_t needed = pages * stat.ms_psize;
  if (stat.ms_psize == 0 || file_bytes < needed) {
    fail(__FILE__, __LINE__,
         fmt::format("{} is truncated: the file has {} bytes but the database uses {} ({} pages of "
                     "{} bytes); {} bytes are missing",
                     data_file.string(), file_bytes, needed, pages, stat.ms_psize,
                     needed - std::min(needed, file_bytes)),
         kDamagedHint);
  }
  if (info.me_mapsize < needed) {
    fail(__FILE__, __LINE__,
         fmt::format("{}: LMDB's map of {} bytes does not cover the {} bytes in use",
                     data_file.string(), info.me_mapsize, needed),
         kDamagedHint);
  }
}

// Where the process maps data.mdb: *base becomes the start of the file's map when `inside` (a
// pointer LMDB returned into its map) lies in a mapping of the file `st` describes, null when it
// lies elsewhere. Returns false when the process' mappings cannot be read (no /proc): then the
// map is unknown. LMDB does not tell where it mapped the file (MDB_envinfo::me_mapaddr is the
// address recorded in the meta page, 0 unless MDB_FIXEDMAP), so /proc/self/maps does.
bool map_base_of(const void* inside, const struct stat& st, const uint8_t** base) {
  *base = nullptr;
  const auto at = reinterpret_cast<uintptr_t>(inside);
  FILE* maps = std::fopen("/proc/self/maps", "re");
  if (maps == nullptr) return false;
  char line[4096];
  while (std::fgets(line, sizeof line, maps) != nullptr) {
    unsigned long begin = 0, end = 0, offset = 0, inode = 0;
    unsigned dev_major = 0, dev_minor = 0;
    if (std::sscanf(line, "%lx-%lx %*s %lx %x:%x %lu", &begin, &end, &offset, &dev_major,
                    &dev_minor, &inode) != 6) {
      continue;
    }
    if (at < begin || at >= end) continue;
    if (inode == st.st_ino && dev_major == major(st.st_dev) && dev_minor == minor(st.st_dev) &&
        offset <= begin) {
      *base = reinterpret_cast<const uint8_t*>(begin - offset);
    }
    break;
  }
  std::fclose(maps);
  return true;
}

// `key` looked up under the fault guard. Returns 0 with the value in *value, which is checked
// to lie inside the file's bytes (LMDB takes a value's size from the page, so a damaged page
// can make the value run past the end of the file: reading it would be a SIGBUS outside LMDB);
// MDB_NOTFOUND; or kDamaged with the reason in *why (a fault, an assertion, another LMDB error,
// a value outside the file). `map` is the file's map (null: not known yet; then the value is
// only checked against the file's size).
int guarded_get(MDB_txn* txn, MDB_dbi dbi, std::string_view key, const uint8_t* map,
                uint64_t file_bytes, MDB_val* value, std::string* why) {
  char buffer[64];
  STOKER_CHECK(key.size() <= sizeof buffer, "LMDB key too long: ", key);
  std::memcpy(buffer, key.data(), key.size());
  MDB_val k{key.size(), buffer};
  *value = MDB_val{};
  const int rc = guarded([&] { return mdb_get(txn, dbi, &k, value); }, why);
  if (rc == MDB_NOTFOUND || rc == kDamaged) return rc;
  if (rc != 0) {
    *why = fmt::format("LMDB: {}", mdb_strerror(rc));
    return kDamaged;
  }
  const auto at = reinterpret_cast<uintptr_t>(value->mv_data);
  const uint64_t size = value->mv_size;
  if (map != nullptr) {
    const auto begin = reinterpret_cast<uintptr_t>(map);
    if (at < begin || at - begin > file_bytes || size > file_bytes - (at - begin)) {
      *why = at < begin || at - begin > file_bytes
                 ? fmt::format("its value of {} bytes lies outside the file", size)
                 : fmt::format(
                       "its value of {} bytes at byte {} runs past the end of the file ({} bytes)",
                       size, at - begin, file_bytes);
      return kDamaged;
    }
  } else if (size > file_bytes) {
    *why = fmt::format("its value claims {} bytes, more than the file's {}", size, file_bytes);
    return kDamaged;
  }
  return 0;
}

}  // namespace

LmdbImageDataset::LmdbImageDataset(std::filesystem::path path, LmdbOptions options)
    : path_(std::move(path)), options_(options) {
  std::error_code ec;
  if (!std::filesystem::exists(path_, ec)) {
    fail(__FILE__, __LINE__, fmt::format("LMDB dataset {} does not exist", path_.string()),
         kRepackHint);
  }
  if (!std::filesystem::is_directory(path_, ec) ||
      !std::filesystem::exists(path_ / "data.mdb", ec)) {
    fail(__FILE__, __LINE__,
         fmt::format("{} is not an LMDB database folder (no data.mdb inside)", path_.string()),
         kRepackHint);
  }
  const std::filesystem::path data_file = path_ / "data.mdb";
  file_bytes_ = std::filesystem::file_size(data_file, ec);
  if (ec) {
    fail(__FILE__, __LINE__,
         fmt::format("cannot read the size of {}: {}", data_file.string(), ec.message()),
         kDamagedHint);
  }
  int max_readers = options_.max_readers;
  if (max_readers <= 0) {
    max_readers = std::max(126, 4 * static_cast<int>(std::thread::hardware_concurrency()) + 16);
  }
  unsigned flags = MDB_RDONLY | MDB_NOTLS;
  if (!options_.read_ahead) flags |= MDB_NORDAHEAD;
  if (options_.no_lock) flags |= MDB_NOLOCK;
  // The map normally spans the size the packer reserved (up to 1 TiB of address space). Where
  // address space is short (ulimit -v, a sanitizer's shadow memory) that fails with ENOMEM;
  // then map only the data file: a packed database never grows.
  std::string why;
  for (int attempt = 0;; ++attempt) {
    lmdb_check(mdb_env_create(&env_), "mdb_env_create", path_);
    detail::guard_lmdb_assertions(env_);
    int rc = mdb_env_set_maxreaders(env_, static_cast<unsigned>(max_readers));
    if (rc == 0 && attempt > 0) rc = mdb_env_set_mapsize(env_, static_cast<size_t>(file_bytes_));
    if (rc == 0) rc = guarded([&] { return mdb_env_open(env_, path_.c_str(), flags, 0664); }, &why);
    if (rc == 0) break;
    mdb_env_close(env_);  // a failed open leaves the handle unusable
    env_ = nullptr;
    if (rc == kDamaged) guarded_check(rc, why, "mdb_env_open", data_file);
    // An empty data file reads as a new environment, which a read-only open cannot create.
    if (is_damaged_file_error(rc) || file_bytes_ == 0) {
      fail(__FILE__, __LINE__,
           fmt::format("{} ({} bytes) is truncated or damaged: LMDB cannot open it ({})",
                       data_file.string(), file_bytes_, mdb_strerror(rc)),
           kDamagedHint);
    }
    // A read-only folder (a shared dataset mount, EROFS; another user's files, EACCES) has no
    // room for LMDB's lock file. A database written by `stoker pack` is never written again
    // (the packer builds it under a temporary name and renames it), so its readers need no lock.
    if ((rc == EACCES || rc == EROFS) && (flags & MDB_NOLOCK) == 0) {
      flags |= MDB_NOLOCK;
      continue;
    }
    if (rc != ENOMEM || attempt > 0) lmdb_check(rc, "mdb_env_open", path_);
  }
  MDB_txn* txn = nullptr;
  try {
    check_pages_present(env_, data_file, file_bytes_);
    unsigned slots = 0;
    lmdb_check(mdb_env_get_maxreaders(env_, &slots), "mdb_env_get_maxreaders", path_);
    reader_slots_ = static_cast<int>(slots);
    guarded_check(guarded([&] { return mdb_txn_begin(env_, nullptr, MDB_RDONLY, &txn); }, &why),
                  why, "mdb_txn_begin", data_file);
    MDB_dbi dbi = 0;
    guarded_check(guarded([&] { return mdb_dbi_open(txn, nullptr, 0, &dbi); }, &why), why,
                  "mdb_dbi_open", data_file);
    dbi_ = dbi;
    int fd = -1;
    struct stat st {};
    const bool have_stat = mdb_env_get_fd(env_, &fd) == 0 && ::fstat(fd, &st) == 0;
    // The metadata (and, when it has no format tag, sample 0): 0, MDB_NOTFOUND or kDamaged.
    // The first value found tells where data.mdb is mapped; from then on every value is checked
    // to lie inside the file.
    bool map_known = false;
    auto get = [&](const std::string& key, std::string& value) -> int {
      MDB_val v{};
      int rc = guarded_get(txn, dbi, key, map_, file_bytes_, &v, &why);
      if (rc == 0 && !map_known && have_stat) {
        map_known = map_base_of(v.mv_data, st, &map_);
        if (map_known && map_ == nullptr) {
          why = "its value lies outside data.mdb's map";
          return kDamaged;
        }
        if (map_known) rc = guarded_get(txn, dbi, key, map_, file_bytes_, &v, &why);
      }
      if (rc == 0) value.assign(static_cast<const char*>(v.mv_data), v.mv_size);
      return rc;
    };
    auto damaged = [&](const std::string& key) {
      fail(__FILE__, __LINE__,
           fmt::format("{}: damaged page: data.mdb cannot be read at key {} ({})", path_.string(),
                       key, why),
           kDamagedHint);
    };
    std::string format, classes, samples;
    const int format_rc = get(kMetaFormatKey, format);
    if (format_rc == kDamaged) damaged(kMetaFormatKey);
    if (format_rc == MDB_NOTFOUND) {
      // No format tag: a database of another tool, or a damaged page that hides the tag (and
      // others). Walking the tree tells them apart: a damaged one does not yield the entries
      // its meta page records.
      if (!tree_is_whole(txn, dbi, &why)) damaged(kMetaFormatKey);
      fail(__FILE__, __LINE__,
           fmt::format(
               "{} was not written by `stoker pack` (or its pack was interrupted): no {} key",
               path_.string(), kMetaFormatKey),
           kRepackHint);
    }
    if (format != kImageFormatTag) {
      fail(__FILE__, __LINE__,
           fmt::format("{} has unknown format '{}' (this build reads '{}')", path_.string(), format,
                       kImageFormatTag),
           "repack it with this version of `stoker pack`, or use the stoker that wrote it");
    }
    const int classes_rc = get(kMetaClassesKey, classes);
    if (classes_rc == kDamaged) damaged(kMetaClassesKey);
    const int samples_rc = get(kMetaSamplesKey, samples);
    if (samples_rc == kDamaged) damaged(kMetaSamplesKey);
    mdb_txn_abort(txn);
    txn = nullptr;
    int64_t n = -1;
    if (samples_rc == 0) {
      const auto res = std::from_chars(samples.data(), samples.data() + samples.size(), n);
      if (res.ec != std::errc() || res.ptr != samples.data() + samples.size()) n = -1;
    }
    if (n < 0 || classes_rc != 0 || classes.empty()) {
      fail(__FILE__, __LINE__,
           fmt::format("{}: metadata {} / {} missing or malformed", path_.string(), kMetaSamplesKey,
                       kMetaClassesKey),
           kRepackHint);
    }
    size_ = n;
    size_t start = 0;
    while (start <= classes.size()) {
      const size_t end = std::min(classes.find('\n', start), classes.size());
      class_names_.push_back(classes.substr(start, end - start));
      start = end + 1;
    }
  } catch (...) {
    if (txn != nullptr) mdb_txn_abort(txn);
    mdb_env_close(env_);
    env_ = nullptr;
    throw;
  }
}

LmdbImageDataset::~LmdbImageDataset() {
  if (env_ != nullptr) mdb_env_close(env_);
}

LmdbImageDataset::Reader::Reader(const LmdbImageDataset& dataset) : dataset_(&dataset) {
  std::string why;
  guarded_check(
      guarded([&] { return mdb_txn_begin(dataset.env_, nullptr, MDB_RDONLY, &txn_); }, &why), why,
      "mdb_txn_begin (reader)", dataset.path_ / "data.mdb");
  active_ = true;
}

LmdbImageDataset::Reader::Reader(Reader&& other) noexcept
    : dataset_(other.dataset_), txn_(other.txn_), active_(other.active_) {
  other.txn_ = nullptr;
  other.active_ = false;
}

LmdbImageDataset::Reader::~Reader() {
  if (txn_ != nullptr) mdb_txn_abort(txn_);
}

void LmdbImageDataset::Reader::reset() {
  if (txn_ != nullptr && active_) mdb_txn_reset(txn_);
  active_ = false;
}

void LmdbImageDataset::Reader::renew() {
  STOKER_CHECK(txn_ != nullptr, "LmdbImageDataset::Reader::renew on a moved-from Reader");
  if (active_) return;
  std::string why;
  guarded_check(guarded([&] { return mdb_txn_renew(txn_); }, &why), why, "mdb_txn_renew",
                dataset_->path_ / "data.mdb");
  active_ = true;
}

std::optional<std::span<const uint8_t>> LmdbImageDataset::Reader::try_value(int64_t index,
                                                                            std::string* error) {
  auto bad = [&](std::string why) -> std::optional<std::span<const uint8_t>> {
    if (error != nullptr) {
      *error = fmt::format("{} key {}: {}", dataset_->path_.string(), sample_key(index), why);
    }
    return std::nullopt;
  };
  if (txn_ == nullptr || !active_) return bad("Reader is reset or moved-from (call renew())");
  if (index < 0 || index >= dataset_->size_) {
    return bad(fmt::format("index {} is not in [0, {})", index, dataset_->size_));
  }
  MDB_val mv{};
  std::string why;
  const int rc = guarded_get(txn_, dataset_->dbi_, sample_key(index), dataset_->map_,
                             dataset_->file_bytes_, &mv, &why);
  if (rc == MDB_NOTFOUND) {
    // stoker pack writes every key below the sample count: one that is missing was lost.
    return bad("record missing (a damaged page, or a database not written by `stoker pack`)");
  }
  if (rc != 0) {
    // A fault or an LMDB error leaves the transaction failed or half-way through a lookup; a
    // fresh snapshot lets the other records be read.
    std::string ignored;
    const auto renew = [&] {
      mdb_txn_reset(txn_);
      return mdb_txn_renew(txn_);
    };
    active_ = guarded(renew, &ignored) == 0;
    return bad(fmt::format("damaged page in data.mdb ({})", why));
  }
  return std::span<const uint8_t>(static_cast<const uint8_t*>(mv.mv_data), mv.mv_size);
}

std::optional<SampleView> LmdbImageDataset::Reader::try_read(int64_t index, std::string* error) {
  const std::optional<std::span<const uint8_t>> value = try_value(index, error);
  if (!value) return std::nullopt;
  SampleView view;
  std::string why = parse_record(*value, dataset_->num_classes(), view);
  if (!why.empty()) {
    if (error != nullptr) {
      *error = fmt::format("{} key {}: {}", dataset_->path_.string(), sample_key(index), why);
    }
    return std::nullopt;
  }
  view.index = index;
  return view;
}

SampleView LmdbImageDataset::Reader::read(int64_t index) {
  std::string error;
  std::optional<SampleView> view = try_read(index, &error);
  if (!view) {
    fail(__FILE__, __LINE__, std::move(error),
         "the database is damaged or was written by another tool: repack it with `stoker pack` "
         "(or use the loader's skip policy)");
  }
  return *view;
}

}  // namespace stoker::data
