#include "data/pack_output.h"

#include <sys/stat.h>

#include <fmt/format.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "data/pack_input.h"
#include "stoker/core/error.h"
#include "stoker/data/lmdb_dataset.h"

namespace stoker::data::detail {

namespace fs = std::filesystem;

namespace {

constexpr const char* kApartHint =
    "choose an --out outside the inputs (for example a folder next to the image folder)";

struct FileId {
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator==(const FileId& o) const { return dev == o.dev && ino == o.ino; }
};

std::optional<FileId> file_id(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return std::nullopt;
  return FileId{st.st_dev, st.st_ino};
}

fs::path canonical_or_absolute(const fs::path& p) {
  std::error_code ec;
  fs::path c = fs::weakly_canonical(fs::absolute(p, ec), ec);
  if (ec) c = fs::absolute(p, ec).lexically_normal();
  // "db/" and "db" are the same folder.
  if (!c.has_filename() && c.has_parent_path() && c != c.root_path()) c = c.parent_path();
  return c;
}

// The identities of `p` and of its ancestors that exist, `p` first.
std::vector<FileId> ids_up_from(const fs::path& p) {
  std::vector<FileId> ids;
  for (fs::path q = p;; q = q.parent_path()) {
    if (const auto id = file_id(q)) ids.push_back(*id);
    if (q.empty() || q == q.parent_path()) break;
  }
  return ids;
}

bool contains(const std::vector<FileId>& ids, const std::optional<FileId>& id) {
  return id && std::find(ids.begin(), ids.end(), *id) != ids.end();
}

// Whether `inner` is `outer` or lies below it, component by component.
bool lexically_within(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin();
  for (auto o = outer.begin(); o != outer.end(); ++o, ++i) {
    if (o->empty()) continue;  // a trailing separator
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

// Why `out` (which exists; `st` from lstat) is not a database written by `stoker pack`, or "".
std::string why_not_a_stoker_database(const fs::path& out, const struct stat& st) {
  if (S_ISLNK(st.st_mode)) return "a symbolic link";
  if (!S_ISDIR(st.st_mode)) return file_type_name(st.st_mode);
  bool has_data = false;
  std::error_code ec;
  for (fs::directory_iterator it(out, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    struct stat entry {};
    const bool regular = ::lstat(it->path().c_str(), &entry) == 0 && S_ISREG(entry.st_mode);
    if ((name == "data.mdb" || name == "lock.mdb") && regular) {
      has_data = has_data || name == "data.mdb";
      continue;
    }
    return fmt::format("a folder holding {} (a database holds data.mdb and lock.mdb only)", name);
  }
  if (ec) return fmt::format("a folder that cannot be listed ({})", ec.message());
  if (!has_data) return "a folder without data.mdb";
  try {
    // no_lock: looking creates no lock.mdb.
    const LmdbImageDataset ds(out, {.no_lock = true});
  } catch (const Error& e) {
    return fmt::format("an LMDB folder that is not a readable stoker database ({})", e.message());
  }
  return {};
}

}  // namespace

void check_output_apart_from_inputs(const fs::path& out, const std::vector<PackInput>& inputs) {
  const fs::path out_c = canonical_or_absolute(out);
  const std::optional<FileId> out_id = file_id(out_c);
  const std::vector<FileId> out_chain = ids_up_from(out_c);
  for (const PackInput& input : inputs) {
    const fs::path in_c = canonical_or_absolute(input.path);
    const std::optional<FileId> in_id = file_id(in_c);
    const bool same = out_c == in_c || (out_id && in_id && *out_id == *in_id);
    if (same) {
      core::detail::throw_error(
          __FILE__, __LINE__,
          fmt::format("stoker pack: --out {} is {} {}: the pack would replace it", out.string(),
                      input.what, input.path.string()),
          kApartHint);
    }
    if (!input.may_hold_output && (lexically_within(out_c, in_c) || contains(out_chain, in_id))) {
      core::detail::throw_error(__FILE__, __LINE__,
                                fmt::format("stoker pack: --out {} is inside {} {}", out.string(),
                                            input.what, input.path.string()),
                                kApartHint);
    }
    if (lexically_within(in_c, out_c) || (out_id && contains(ids_up_from(in_c), out_id))) {
      core::detail::throw_error(
          __FILE__, __LINE__,
          fmt::format("stoker pack: --out {} contains {} {}: the pack would replace it",
                      out.string(), input.what, input.path.string()),
          kApartHint);
    }
  }
}

void check_output_replaceable(const fs::path& out, bool overwrite) {
  struct stat st {};
  if (::lstat(out.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    core::detail::throw_error(__FILE__, __LINE__,
                              fmt::format("stoker pack: cannot check the output {}: {}",
                                          out.string(), std::strerror(errno)),
                              "choose an --out inside a folder you can read and write");
  }
  if (!overwrite) {
    core::detail::throw_error(
        __FILE__, __LINE__, fmt::format("stoker pack: output {} already exists", out.string()),
        "pass --overwrite to replace it (only a database written by `stoker pack`), or choose "
        "another --out");
  }
  const std::string why = why_not_a_stoker_database(out, st);
  if (!why.empty()) {
    core::detail::throw_error(
        __FILE__, __LINE__,
        fmt::format("stoker pack: --overwrite replaces only a database written by `stoker pack`, "
                    "and --out {} is {}",
                    out.string(), why),
        fmt::format("choose another --out, or remove {} yourself if it is meant to go",
                    out.string()));
  }
}

void remove_stoker_database(const fs::path& out) {
  check_output_replaceable(out, /*overwrite=*/true);
  std::error_code ec;
  for (const char* name : {"lock.mdb", "data.mdb"}) {
    fs::remove(out / name, ec);
    STOKER_CHECK_HINT(!ec, "remove it yourself, or choose another --out",
                      "stoker pack: cannot remove the old database ", out.string(), ": ",
                      ec.message());
  }
  fs::remove(out, ec);  // not remove_all: a file that appeared meanwhile stays, and this fails
  STOKER_CHECK_HINT(!ec, "remove it yourself, or choose another --out",
                    "stoker pack: cannot remove the old database folder ", out.string(), ": ",
                    ec.message());
}

}  // namespace stoker::data::detail
