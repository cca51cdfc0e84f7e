// LmdbImageDataset: the data file's size (against the pages LMDB says are in use) and the
// metadata are validated once at open; per-sample checks live in parse_record so that read() and
// try_read() report exactly the same problems.
#include "stoker/data/lmdb_dataset.h"

#include <lmdb.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <thread>

#include "stoker/core/error.h"

namespace stoker::data {

namespace {

using core::detail::str;

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
    hint = "the folder is read-only: open with LmdbOptions::no_lock (no writer may run)";
  fail(__FILE__, __LINE__, str("LMDB ", call, " failed on ", path.string(), ": ", mdb_strerror(rc)),
       hint);
}

// What mdb_env_open says of a data file it cannot use as an environment: too small to hold
// LMDB's two meta pages, or not (or no longer) an LMDB file.
bool is_damaged_file_error(int rc) {
  return rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH || rc == MDB_CORRUPTED ||
         rc == MDB_PAGE_NOTFOUND;
}

// LMDB maps data.mdb and reads pages straight from the map: a page past the end of the file
// is a SIGBUS, not an error. So before anything reads a page, check that the file holds every
// page the newest meta page says is in use, and that the map covers them.
void check_pages_present(MDB_env* env, const std::filesystem::path& data_file,
                         uint64_t file_bytes) {
  MDB_envinfo info{};
  MDB_stat stat{};
  lmdb_check(mdb_env_info(env, &info), "mdb_env_info", data_file);
  lmdb_check(mdb_env_stat(env, &stat), "mdb_env_stat", data_file);
  const uint64_t pages = static_cast<uint64_t>(info.me_last_pgno) + 1;
  const uint64_t needed = pages * stat.ms_psize;
  if (stat.ms_psize == 0 || file_bytes < needed) {
    fail(__FILE__, __LINE__,
         str(data_file.string(), " is truncated: the file has ", file_bytes,
             " bytes but the database uses ", needed, " (", pages, " pages of ", stat.ms_psize,
             " bytes); ", needed - std::min(needed, file_bytes), " bytes are missing"),
         kDamagedHint);
  }
  if (info.me_mapsize < needed) {
    fail(__FILE__, __LINE__,
         str(data_file.string(), ": LMDB's map of ", info.me_mapsize, " bytes does not cover the ",
             needed, " bytes in use"),
         kDamagedHint);
  }
}

std::optional<std::string> get_meta(MDB_txn* txn, MDB_dbi dbi, const char* key) {
  MDB_val k{std::strlen(key), const_cast<char*>(key)};
  MDB_val v{};
  if (mdb_get(txn, dbi, &k, &v) != 0) return std::nullopt;
  return std::string(static_cast<const char*>(v.mv_data), v.mv_size);
}

}  // namespace

LmdbImageDataset::LmdbImageDataset(std::filesystem::path path, LmdbOptions options)
    : path_(std::move(path)), options_(options) {
  std::error_code ec;
  if (!std::filesystem::exists(path_, ec)) {
    fail(__FILE__, __LINE__, str("LMDB dataset ", path_.string(), " does not exist"), kRepackHint);
  }
  if (!std::filesystem::is_directory(path_, ec) ||
      !std::filesystem::exists(path_ / "data.mdb", ec)) {
    fail(__FILE__, __LINE__,
         str(path_.string(), " is not an LMDB database folder (no data.mdb inside)"), kRepackHint);
  }
  const std::filesystem::path data_file = path_ / "data.mdb";
  file_bytes_ = std::filesystem::file_size(data_file, ec);
  if (ec) {
    fail(__FILE__, __LINE__,
         str("cannot read the size of ", data_file.string(), ": ", ec.message()), kDamagedHint);
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
  for (int attempt = 0;; ++attempt) {
    lmdb_check(mdb_env_create(&env_), "mdb_env_create", path_);
    int rc = mdb_env_set_maxreaders(env_, static_cast<unsigned>(max_readers));
    if (rc == 0 && attempt > 0) rc = mdb_env_set_mapsize(env_, static_cast<size_t>(file_bytes_));
    if (rc == 0) rc = mdb_env_open(env_, path_.c_str(), flags, 0664);
    if (rc == 0) break;
    mdb_env_close(env_);  // a failed open leaves the handle unusable
    env_ = nullptr;
    // An empty data file reads as a new environment, which a read-only open cannot create.
    if (is_damaged_file_error(rc) || file_bytes_ == 0) {
      fail(__FILE__, __LINE__,
           str(data_file.string(), " (", file_bytes_,
               " bytes) is truncated or damaged: LMDB cannot open it (", mdb_strerror(rc), ")"),
           kDamagedHint);
    }
    if (rc != ENOMEM || attempt > 0) lmdb_check(rc, "mdb_env_open", path_);
  }
  try {
    check_pages_present(env_, data_file, file_bytes_);
    unsigned slots = 0;
    lmdb_check(mdb_env_get_maxreaders(env_, &slots), "mdb_env_get_maxreaders", path_);
    reader_slots_ = static_cast<int>(slots);
    MDB_txn* txn = nullptr;
    lmdb_check(mdb_txn_begin(env_, nullptr, MDB_RDONLY, &txn), "mdb_txn_begin", path_);
    MDB_dbi dbi = 0;
    const int rc = mdb_dbi_open(txn, nullptr, 0, &dbi);
    if (rc != 0) mdb_txn_abort(txn);
    lmdb_check(rc, "mdb_dbi_open", path_);
    dbi_ = dbi;
    const auto format = get_meta(txn, dbi, kMetaFormatKey);
    const auto classes = get_meta(txn, dbi, kMetaClassesKey);
    const auto samples = get_meta(txn, dbi, kMetaSamplesKey);
    mdb_txn_abort(txn);
    if (!format) {
      fail(__FILE__, __LINE__,
           str(path_.string(),
               " was not written by `stoker pack` (or its pack was interrupted): no ",
               kMetaFormatKey, " key"),
           kRepackHint);
    }
    if (*format != kImageFormatTag) {
      fail(__FILE__, __LINE__,
           str(path_.string(), " has unknown format '", *format, "' (this build reads '",
               kImageFormatTag, "')"),
           "repack it with this version of `stoker pack`, or use the stoker that wrote it");
    }
    int64_t n = -1;
    if (samples) {
      const auto res = std::from_chars(samples->data(), samples->data() + samples->size(), n);
      if (res.ec != std::errc() || res.ptr != samples->data() + samples->size()) n = -1;
    }
    if (n < 0 || !classes || classes->empty()) {
      fail(__FILE__, __LINE__,
           str(path_.string(), ": metadata ", kMetaSamplesKey, " / ", kMetaClassesKey,
               " missing or malformed"),
           kRepackHint);
    }
    size_ = n;
    size_t start = 0;
    while (start <= classes->size()) {
      const size_t end = std::min(classes->find('\n', start), classes->size());
      class_names_.push_back(classes->substr(start, end - start));
      start = end + 1;
    }
  } catch (...) {
    mdb_env_close(env_);
    env_ = nullptr;
    throw;
  }
}

LmdbImageDataset::~LmdbImageDataset() {
  if (env_ != nullptr) mdb_env_close(env_);
}

LmdbImageDataset::Reader::Reader(const LmdbImageDataset& dataset) : dataset_(&dataset) {
  lmdb_check(mdb_txn_begin(dataset.env_, nullptr, MDB_RDONLY, &txn_), "mdb_txn_begin (reader)",
             dataset.path_);
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
  lmdb_check(mdb_txn_renew(txn_), "mdb_txn_renew", dataset_->path_);
  active_ = true;
}

std::optional<std::span<const uint8_t>> LmdbImageDataset::Reader::try_value(int64_t index,
                                                                            std::string* error) {
  auto bad = [&](std::string why) -> std::optional<std::span<const uint8_t>> {
    if (error != nullptr) {
      *error = str(dataset_->path_.string(), " key ", sample_key(index), ": ", why);
    }
    return std::nullopt;
  };
  if (txn_ == nullptr || !active_) return bad("Reader is reset or moved-from (call renew())");
  if (index < 0 || index >= dataset_->size_) {
    return bad(str("index ", index, " is not in [0, ", dataset_->size_, ")"));
  }
  char key[32];
  const std::string k = sample_key(index);
  std::memcpy(key, k.data(), k.size());
  MDB_val mk{k.size(), key};
  MDB_val mv{};
  const int rc = mdb_get(txn_, dataset_->dbi_, &mk, &mv);
  if (rc == MDB_NOTFOUND) return bad("record missing");
  if (rc != 0) {
    // LMDB marks the transaction failed (every later call: MDB_BAD_TXN); a fresh snapshot lets
    // the other records be read.
    mdb_txn_reset(txn_);
    active_ = mdb_txn_renew(txn_) == 0;
    return bad(str("LMDB lookup failed (data.mdb is damaged): ", mdb_strerror(rc)));
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
      *error = str(dataset_->path_.string(), " key ", sample_key(index), ": ", why);
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
