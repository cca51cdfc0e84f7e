// scan_dataset: one Reader walks the sample keys in order (the file's order: pack appends them).
#include "data/dataset_scan.h"

#include <fmt/format.h>

#include "stoker/core/error.h"
#include "stoker/data/decode.h"
#include "stoker/data/lmdb_dataset.h"
#include "util/progress_bar.h"

namespace stoker::data {

namespace {
// The Reader's reasons start with "<database> key <key>: "; a listing names the key itself.
std::string without_prefix(const std::string& why, const std::string& prefix) {
  return why.compare(0, prefix.size(), prefix) == 0 ? why.substr(prefix.size()) : why;
}
}  // namespace

DatasetScan scan_dataset(const LmdbImageDataset& dataset, const ScanOptions& options) {
  DatasetScan scan;
  scan.verified = options.verify;
  scan.records = dataset.size();
  auto reader = dataset.reader();
  JpegDecoder decoder;
  util::ProgressBar bar(options.progress);
  const char* label = options.verify ? "verifying" : "reading headers";
  for (int64_t i = 0; i < dataset.size(); ++i) {
    const std::string key = sample_key(i);
    std::string why;
    std::string error;
    if (const auto value = reader.try_value(i, &error)) {
      RecordHeader header;
      why = parse_record_header(*value, dataset.num_classes(), header);
      if (why.empty()) {
        scan.payload_bytes += header.payload_bytes;
        scan.versions[header.version] += 1;
        if (options.verify) {
          SampleView view;
          why = parse_record(*value, dataset.num_classes(), view);
          if (why.empty()) {
            try {
              decoder.read_header(view.payload, key);
            } catch (const Error& e) {
              why = e.message();
            }
          }
        }
      }
    } else {
      why = without_prefix(error, dataset.path().string() + " key " + key + ": ");
    }
    if (!why.empty()) {
      ++scan.bad;
      if (scan.listed.size() < options.max_listed) scan.listed.push_back({i, key, std::move(why)});
    }
    if (bar.enabled()) bar.draw(label, i + 1, dataset.size(), fmt::format(", {} bad", scan.bad));
  }
  if (bar.enabled()) {
    bar.draw(label, dataset.size(), dataset.size(), fmt::format(", {} bad", scan.bad),
             /*force=*/true);
    bar.finish();
  }
  return scan;
}

}  // namespace stoker::data
