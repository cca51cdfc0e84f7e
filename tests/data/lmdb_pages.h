// Test helper (no GoogleTest): the live pages of an LMDB data file, found by walking the B-tree
// of the main database from the newest meta page, so that tests and the page-damage fuzz target
// can damage pages the readers really use (the file also holds stale copies of pages that
// copy-on-write left behind: damaging those changes nothing).
//
// On-disk layout (LMDB 0.9, lmdb.h / mdb.c), little-endian:
//   page header (16 bytes): pgno u64 @0, pad u16 @8, flags u16 @10, lower u16 @12, upper u16 @14
//     (an overflow page keeps its page count u32 @12); node offsets u16 from @16 up to `lower`.
//   flags: P_BRANCH 0x01, P_LEAF 0x02, P_OVERFLOW 0x04, P_META 0x08.
//   meta page (pages 0 and 1): after the header magic u32, version u32, address u64, mapsize
//     u64, then two MDB_db of 48 bytes (free list, main): pad u32 (the free list's holds the
//     page size), flags u16, depth u16, branch/leaf/overflow pages u64, entries u64, root u64;
//     then last_pgno u64 @136 and txnid u64 @144.
//   node: lo u16 @0, hi u16 @2, flags u16 @4, key size u16 @6, key @8, then the data. In a branch
//     the child's page number is lo | hi << 16 | flags << 32; in a leaf lo | hi << 16 is the
//     data size, and with flag F_BIGDATA (0x01) the data is the u64 number of its first
//     overflow page.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace stoker::test {

struct LmdbPage {
  enum Kind { branch, leaf, overflow } kind = leaf;
  uint64_t pgno = 0;
  size_t offset = 0;                  // of the page in the file
  bool root = false;                  // the main database's root
  std::vector<std::string> keys;      // a leaf's keys
  std::vector<size_t> nodes;          // a leaf's nodes: their file offsets
  std::vector<size_t> overflow_refs;  // a leaf's F_BIGDATA page numbers: their file offsets
};

struct LmdbPages {
  size_t page_size = 0;
  uint64_t root = 0;
  std::vector<LmdbPage> pages;  // live pages, parents before children
};

namespace lmdb_pages_detail {
inline uint64_t le(const std::vector<uint8_t>& f, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes && at + i < f.size(); ++i) v |= uint64_t{f[at + i]} << (8 * i);
  return v;
}
}  // namespace lmdb_pages_detail

// The live pages of `file` (an intact data.mdb); empty `pages` when the file is not one.
inline LmdbPages live_lmdb_pages(const std::vector<uint8_t>& file) {
  using lmdb_pages_detail::le;
  LmdbPages out;
  if (file.size() < 2 * 4096 || le(file, 16, 4) != 0xBEEFC0DE) return out;
  const size_t psize = le(file, 40, 4);
  if (psize < 512 || file.size() < 2 * psize) return out;
  out.page_size = psize;
  const size_t meta = le(file, psize + 144, 8) > le(file, 144, 8) ? psize : 0;
  out.root = le(file, meta + 128, 8);
  const uint64_t pages_in_file = file.size() / psize;
  std::vector<uint64_t> pending{out.root};
  std::set<uint64_t> seen;
  while (!pending.empty()) {
    const uint64_t pgno = pending.front();
    pending.erase(pending.begin());
    if (pgno < 2 || pgno >= pages_in_file || !seen.insert(pgno).second) continue;
    const size_t at = static_cast<size_t>(pgno) * psize;
    LmdbPage page;
    page.pgno = pgno;
    page.offset = at;
    page.root = pgno == out.root;
    const uint64_t flags = le(file, at + 10, 2);
    const size_t lower = le(file, at + 12, 2);
    if ((flags & 0x01) == 0 && (flags & 0x02) == 0) continue;
    page.kind = (flags & 0x01) != 0 ? LmdbPage::branch : LmdbPage::leaf;
    std::vector<LmdbPage> overflow;
    for (size_t p = 16; p + 2 <= lower && p < psize; p += 2) {
      const size_t node = at + le(file, at + p, 2);
      if (page.kind == LmdbPage::branch) {
        pending.push_back(le(file, node, 2) | le(file, node + 2, 2) << 16 |
                          le(file, node + 4, 2) << 32);
        continue;
      }
      const size_t ksize = le(file, node + 6, 2);
      page.nodes.push_back(node);
      page.keys.emplace_back(reinterpret_cast<const char*>(file.data()) + node + 8,
                             std::min(ksize, file.size() - std::min(file.size(), node + 8)));
      if ((le(file, node + 4, 2) & 0x01) != 0) {
        page.overflow_refs.push_back(node + 8 + ksize);
        LmdbPage first;
        first.kind = LmdbPage::overflow;
        first.pgno = le(file, node + 8 + ksize, 8);
        first.offset = static_cast<size_t>(first.pgno) * psize;
        if (first.pgno < pages_in_file) overflow.push_back(first);
      }
    }
    out.pages.push_back(std::move(page));
    out.pages.insert(out.pages.end(), overflow.begin(), overflow.end());
  }
  return out;
}

}  // namespace stoker::test
