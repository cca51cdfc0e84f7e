// scan_dataset: reads every record of a packed database and says what it holds and what is
// wrong with it (`stoker info`, `stoker info --verify`; docs/formats.md "What is checked").
//
// Every sample key 0 .. size()-1 is looked up. The header scan (default) checks what a reader
// checks without the payload: the record header (magic, version, kind, label range) and that
// its byte count matches the value. `verify` also reads every payload byte: the version-2
// checksum and the JPEG header (TurboJPEG's, through JpegDecoder::read_header: magic, size,
// pixel budget). A damaged LMDB page is a bad record too (try_value's LMDB error), never a crash:
// the dataset checked at open that data.mdb holds every page in use.
//
// Thread-safety: one call reads through its own Reader; several calls may run at once.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "stoker/data/lmdb_dataset.h"

namespace stoker::data {

struct ScanOptions {
  bool verify = false;     // also the payload checksums and the JPEG headers (reads every byte)
  size_t max_listed = 20;  // bad records kept with their reasons; the others are only counted
  bool progress = false;   // a progress bar on stderr (drawn only when stderr is a terminal)
};

struct BadRecord {
  int64_t index = -1;
  std::string key;
  std::string reason;  // what is wrong, without the database and key
};

struct DatasetScan {
  bool verified = false;  // ScanOptions::verify
  int64_t records = 0;    // records checked (the dataset's size)
  int64_t bad = 0;
  uint64_t payload_bytes = 0;            // of every record whose header parsed
  std::map<uint16_t, int64_t> versions;  // record version -> records whose header parsed
  std::vector<BadRecord> listed;         // the first max_listed bad records, in key order
};

DatasetScan scan_dataset(const LmdbImageDataset& dataset, const ScanOptions& options = {});

}  // namespace stoker::data
