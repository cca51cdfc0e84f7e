// The status check of LMDB, which data links (core/error.h).
#include <lmdb.h>

#include <cerrno>

#include "stoker/core/error.h"

namespace stoker::core::detail {

void check_lmdb(int status, const char* expr, const char* file, int line) {
  if (status == 0) return;
  std::string hint;
  if (status == ENOENT) hint = "the LMDB dataset does not exist: build it with `stoker pack`";
  if (status == MDB_MAP_FULL) hint = "the LMDB map is full: pack with a larger --map-size";
  library_error("LMDB", expr, status, mdb_strerror(status), file, line, hint);
}

}  // namespace stoker::core::detail
