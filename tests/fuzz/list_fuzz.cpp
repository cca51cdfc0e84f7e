// Fuzz target: data::parse_list_file, the parser of `stoker pack --list` files.
//
// Input: the list file's text (any bytes). stoker::Error is the expected outcome of a bad line;
// any other exception or a crash is a finding. Parsed items must hold what pack.h promises: a
// label >= 0, a non-empty path without NUL or newline, relative paths joined to the base. Written
// back as "path label" lines, the items parse again to the same items.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "stoker/core/error.h"
#include "stoker/data/pack.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using stoker::data::PackItem;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::filesystem::path base = "/fuzz/lists";
  std::vector<PackItem> items;
  try {
    items = stoker::data::parse_list_file(text, base, "fuzz.list");
  } catch (const stoker::Error&) {
    return 0;
  }
  size_t lines = 0;
  for (char c : text) lines += c == '\n';
  STOKER_FUZZ_EXPECT(items.size() <= lines + 1, "more items than lines");

  std::string again;
  for (const PackItem& item : items) {
    STOKER_FUZZ_EXPECT(item.label >= 0, "parsed a negative label " + std::to_string(item.label));
    STOKER_FUZZ_EXPECT(!item.path.empty(), "parsed an empty path");
    STOKER_FUZZ_EXPECT(
        item.path.find('\0') == std::string::npos && item.path.find('\n') == std::string::npos,
        "a parsed path holds a NUL or a newline");
    // `base` is absolute, so every path is: relative ones were joined to it.
    STOKER_FUZZ_EXPECT(item.path[0] == '/', "a parsed path is relative: " + item.path);
    again += item.path + " " + std::to_string(item.label) + "\n";
  }

  std::vector<PackItem> back;
  try {
    back = stoker::data::parse_list_file(again, "/elsewhere", "fuzz-again.list");
  } catch (const stoker::Error& e) {
    STOKER_FUZZ_EXPECT(false,
                       std::string("the parsed items, written back, do not parse: ") + e.what());
  }
  STOKER_FUZZ_EXPECT(back.size() == items.size(), "the items written back parse to another count");
  for (size_t i = 0; i < items.size(); ++i) {
    STOKER_FUZZ_EXPECT(back[i].path == items[i].path && back[i].label == items[i].label,
                       "item " + std::to_string(i) + " changed when written back: '" +
                           items[i].path + "' " + std::to_string(items[i].label) + " -> '" +
                           back[i].path + "' " + std::to_string(back[i].label));
  }
  return 0;
}
