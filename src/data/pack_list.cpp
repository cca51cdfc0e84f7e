// List files: parsing (a pure function of the text, safe on any bytes) and the class count, given
// (--classes) or inferred from the labels with a check for the sparse label sets a typo makes.
#include <fmt/format.h>
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <map>

#include "data/pack_input.h"
#include "data/pack_internal.h"
#include "stoker/core/error.h"
#include "stoker/data/pack.h"

namespace stoker::data {

namespace fs = std::filesystem;

namespace {

constexpr const char* kLineHint = "each line is `path label`: a path, a space or tab, a label >= 0";

// At most `limit` bytes of `line`, with control bytes escaped, for an error message.
std::string printable(std::string_view line, size_t limit = 120) {
  std::string out;
  for (size_t i = 0; i < line.size() && i < limit; ++i) {
    const auto c = static_cast<unsigned char>(line[i]);
    if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (line.size() > limit) out += fmt::format("... ({} bytes)", line.size());
  return out;
}

struct ListEntry {
  PackItem item;
  int64_t line = 0;
};

std::vector<ListEntry> parse_lines(std::string_view text, const fs::path& base,
                                   const std::string& list_name) {
  constexpr std::string_view kBom = "\xEF\xBB\xBF";
  if (text.substr(0, kBom.size()) == kBom) text.remove_prefix(kBom.size());
  std::vector<ListEntry> entries;
  int64_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    auto fail = [&](const std::string& what) {
      core::detail::throw_error(__FILE__, __LINE__,
                                fmt::format("stoker pack: {}:{}: {}", list_name, line_no, what),
                                kLineHint);
    };
    if (line.find('\0') != std::string_view::npos) {
      fail("the line contains a NUL byte (is this a text file?): '" + printable(line) + "'");
    }
    constexpr std::string_view kBlank = " \t\r";
    const size_t first = line.find_first_not_of(kBlank);
    if (first == std::string_view::npos || line[first] == '#') continue;
    line = line.substr(first, line.find_last_not_of(kBlank) - first + 1);
    const size_t split = line.find_last_of(" \t");
    if (split == std::string_view::npos) {
      fail("expected `path label`, found one field: '" + printable(line) + "'");
    }
    const std::string_view token = line.substr(split + 1);
    const std::string_view path = line.substr(0, line.find_last_not_of(" \t", split) + 1);
    int64_t label = -1;
    const auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), label);
    const bool digits = !token.empty() && token[0] >= '0' && token[0] <= '9';
    if (ec == std::errc::result_out_of_range || (ec == std::errc() && label > INT32_MAX)) {
      fail(fmt::format(
          "label {} is too large (the largest is {}, and a dataset holds at most {} classes)",
          printable(token, 24), INT32_MAX, kPackMaxClasses));
    }
    if (!digits || ec != std::errc() || end != token.data() + token.size()) {
      fail("the label (the last field) is not an integer >= 0: '" + printable(line) + "'");
    }
    fs::path p{std::string(path)};
    if (p.is_relative()) p = base / p;
    entries.push_back({{p.string(), static_cast<int32_t>(label)}, line_no});
  }
  return entries;
}

// How many samples a label has, and the first lines it is on.
struct LabelUse {
  int64_t count = 0;
  std::vector<int64_t> lines;  // the first few
};

// "1000000 (1 sample: line 57), 999 (3 samples: lines 12, 40, 99)": the largest labels.
std::string largest_labels(const std::map<int32_t, LabelUse>& uses, int how_many) {
  std::string s;
  int shown = 0;
  for (auto it = uses.rbegin(); it != uses.rend() && shown < how_many; ++it, ++shown) {
    if (shown > 0) s += ", ";
    s += fmt::format("{} ({}{}", it->first, it->second.count,
                     it->second.count == 1 ? " sample: line" : " samples: lines");
    for (size_t k = 0; k < it->second.lines.size(); ++k)
      s += fmt::format("{}{}", k > 0 ? ", " : " ", it->second.lines[k]);
    if (it->second.count > static_cast<int64_t>(it->second.lines.size())) s += ", ...";
    s += ")";
  }
  return s;
}

}  // namespace

std::vector<PackItem> parse_list_file(std::string_view text, const fs::path& base,
                                      const std::string& list_name) {
  std::vector<ListEntry> entries = parse_lines(text, base, list_name);
  std::vector<PackItem> items;
  items.reserve(entries.size());
  for (ListEntry& e : entries) items.push_back(std::move(e.item));
  return items;
}

PackSummary pack_list(const fs::path& list, const fs::path& out, const PackOptions& options) {
  detail::check_pack_options(options);
  std::vector<uint8_t> bytes;
  const std::string error = detail::read_input_file(list.string(), bytes);
  STOKER_CHECK_HINT(error.empty(), "pass a text file of `path label` lines",
                    "stoker pack: cannot read list file ", list.string(), ": ", error);
  const std::vector<ListEntry> entries =
      parse_lines(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                  list.parent_path(), list.string());
  STOKER_CHECK_HINT(!entries.empty(), "pass a text file of `path label` lines",
                    "stoker pack: list file ", list.string(), " has no entries");
  detail::PackPrelude prelude;
  int64_t classes = options.classes;
  if (classes > 0) {
    for (const ListEntry& e : entries) {
      STOKER_CHECK_HINT(e.item.label < classes,
                        "fix the label, or pass the dataset's real class count with --classes",
                        "stoker pack: ", list.string(), ":", e.line, ": label ", e.item.label,
                        " is not below --classes ", classes);
    }
  } else {
    std::map<int32_t, LabelUse> uses;
    for (const ListEntry& e : entries) {
      LabelUse& use = uses[e.item.label];
      ++use.count;
      if (use.lines.size() < 3) use.lines.push_back(e.line);
    }
    classes = int64_t{uses.rbegin()->first} + 1;
    const auto distinct = static_cast<int64_t>(uses.size());
    const std::string extremes = fmt::format(
        "{} distinct labels in [0, {}] make {} classes, {} of them without a sample; the largest "
        "labels: {}",
        distinct, classes - 1, classes, classes - distinct, largest_labels(uses, 3));
    // A typo (1000000 among labels 0..999) must not silently make a million-class dataset.
    STOKER_CHECK_HINT(classes <= kPackMaxClasses && !(classes > 1000 && classes > 10 * distinct),
                      "fix the label typo, or pass the real class count with --classes N (labels "
                      "must be below N) if these labels are right",
                      "stoker pack: ", list.string(),
                      ": the labels are grossly sparse: ", extremes);
    if (2 * distinct < classes) {
      prelude.warnings.push_back(
          fmt::format("{}: the labels are sparse: {}; if that is not right, fix the labels; pass "
                      "--classes N to state the class count",
                      list.string(), extremes));
    }
  }
  std::vector<std::string> class_names;
  class_names.reserve(static_cast<size_t>(classes));
  for (int64_t c = 0; c < classes; ++c) class_names.push_back(std::to_string(c));
  std::vector<PackItem> items;
  items.reserve(entries.size());
  for (const ListEntry& e : entries) items.push_back(e.item);
  prelude.inputs.push_back({list, "the list file"});  // and the images' folders (pack_items)
  return detail::pack_items(std::move(items), std::move(class_names), out, options,
                            std::move(prelude));
}

}  // namespace stoker::data
