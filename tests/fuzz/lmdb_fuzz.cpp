// Fuzz target: data::LmdbImageDataset and scan_dataset on a database with damaged pages.
//
// Input: a list of damages, 4 bytes each: a page (byte 0: 0 and 1 are LMDB's meta pages, k >= 2
// the (k - 2)-th live page of the tree, modulo their count, so that every input hits pages the
// readers use), the offset in that page (bytes 1-2, little-endian, modulo the page size) and the
// byte written there (byte 3). A trailing partial damage is ignored. They are applied to a copy
// of a small database packed once at start (`stoker pack synth`: 40 samples, two of them in
// overflow pages), which is then opened and read as `stoker info --verify` and a loader would:
// every record with try_read, then scan_dataset with verify.
//
// LMDB trusts its pages: a damaged one made it read past the file (SIGBUS) or outside its map
// (SIGSEGV), or fail an assertion (abort). Any signal is a finding. So is an exception other
// than stoker::Error at open, a failed read whose reason does not name the database and the key,
// a scan that disagrees with the reads, and a file descriptor or map of the database left after
// the dataset is closed.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "../data/lmdb_pages.h"
#include "data/dataset_scan.h"
#include "fuzz_util.h"
#include "stoker/core/error.h"
#include "stoker/data/lmdb_dataset.h"
#include "stoker/data/pack.h"

namespace {

namespace fs = std::filesystem;
using stoker::fuzz::mapped_under;
using stoker::fuzz::open_fds_under;
using stoker::fuzz::scratch_dir;

struct Clean {
  std::vector<uint8_t> bytes;
  stoker::test::LmdbPages live;
};

// The database every input damages: packed once, deterministically.
const Clean& clean() {
  static const Clean c = [] {
    const fs::path db = scratch_dir("lmdb") / "clean";
    stoker::data::PackOptions options;
    options.threads = 1;
    options.progress = false;
    options.report_skipped = false;
    options.map_size_gib = 1;
    // 38 small images and 2 large ones (the latter over a page: overflow pages).
    const stoker::data::SynthOptions small{.samples = 40, .classes = 2, .size = 24, .seed = 9};
    const stoker::data::SynthOptions large{.samples = 40, .classes = 2, .size = 160, .seed = 9};
    stoker::data::pack_generated(
        40,
        [&](int64_t i, int32_t& label) {
          return stoker::data::synth_jpeg(i % 20 == 7 ? large : small, i, label);
        },
        stoker::data::synth_class_names(2), db, options);
    Clean out;
    std::ifstream f(db / "data.mdb", std::ios::binary);
    out.bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    out.live = stoker::test::live_lmdb_pages(out.bytes);
    STOKER_FUZZ_EXPECT(!out.live.pages.empty(), "no live pages in the packed database");
    fs::remove_all(db);
    return out;
  }();
  return c;
}

}  // namespace

// When the guard jumps out of mdb_env_open (a damaged meta page), what LMDB had allocated for
// that open (the lock file's name, tens of bytes) is never freed: a bounded leak per refused
// open, inside LMDB, which LeakSanitizer is told to expect. Any leak of stoker's own still fails.
extern "C" const char* __lsan_default_suppressions() { return "leak:liblmdb.so\n"; }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Clean& c = clean();
  const size_t psize = c.live.page_size;
  std::vector<uint8_t> bytes = c.bytes;
  for (size_t i = 0; i + 4 <= size; i += 4) {
    const size_t selector = data[i];
    const size_t page_offset =
        selector < 2 ? selector * psize : c.live.pages[(selector - 2) % c.live.pages.size()].offset;
    const size_t at = page_offset + (size_t{data[i + 1]} | size_t{data[i + 2]} << 8) % psize;
    if (at < bytes.size()) bytes[at] = data[i + 3];
  }
  const fs::path dir = scratch_dir("lmdb") / "db";
  fs::create_directories(dir);
  fs::remove(dir / "lock.mdb");
  {
    std::ofstream f(dir / "data.mdb", std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
    STOKER_FUZZ_EXPECT(f.good(), "cannot write " + (dir / "data.mdb").string());
  }
  {
    std::optional<stoker::data::LmdbImageDataset> ds;
    try {
      ds.emplace(dir);
    } catch (const stoker::Error& e) {
      STOKER_FUZZ_EXPECT(e.message().find(dir.string()) != std::string::npos,
                         "the error does not name the database: " + e.message());
    }
    if (ds) {
      int64_t failed = 0;
      auto reader = ds->reader();
      for (int64_t i = 0; i < std::min<int64_t>(ds->size(), 4096); ++i) {
        std::string error;
        if (reader.try_read(i, &error)) continue;
        ++failed;
        const std::string named = dir.string() + " key " + stoker::data::sample_key(i) + ": ";
        STOKER_FUZZ_EXPECT(error.compare(0, named.size(), named) == 0,
                           "the reason does not name the database and the key: " + error);
      }
      if (ds->size() <= 4096) {  // a damaged sample count may claim billions
        const stoker::data::DatasetScan scan = stoker::data::scan_dataset(*ds, {.verify = true});
        STOKER_FUZZ_EXPECT(scan.bad >= failed, "the scan found fewer bad records than the reads: " +
                                                   std::to_string(scan.bad) + " < " +
                                                   std::to_string(failed));
      }
    }
  }
  STOKER_FUZZ_EXPECT(open_fds_under(dir).empty(), "left open: " + open_fds_under(dir));
  STOKER_FUZZ_EXPECT(mapped_under(dir).empty(), "left mapped: " + mapped_under(dir));
  return 0;
}
