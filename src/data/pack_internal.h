// Private: what the packer's entry points (pack.cpp, pack_list.cpp) share.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "data/pack_output.h"
#include "stoker/data/pack.h"

namespace stoker::data::detail {

// Throws stoker::Error naming the option and its valid range when `options` has a value out of
// range (negative threads or resize, quality outside 1..100, map size outside [1, 2^20] GiB,
// max_pixels < 1, classes outside [0, kPackMaxClasses]).
void check_pack_options(const PackOptions& options);

// What was found before packing: inputs already known to be skipped ("path: reason", counted)
// and warnings. pack_items prints them (with report_skipped) and puts them in the summary.
// `inputs` are the paths --out must stay apart from (pack_output.h), besides the folders of the
// items, which pack_items adds unless `inputs_cover_items` (the input folders hold them all).
struct PackPrelude {
  std::vector<std::string> skipped;
  std::vector<std::string> warnings;
  std::vector<PackInput> inputs;
  bool inputs_cover_items = false;
};

PackSummary pack_items(std::vector<PackItem> items, std::vector<std::string> class_names,
                       const std::filesystem::path& out, const PackOptions& options,
                       PackPrelude prelude);

}  // namespace stoker::data::detail
