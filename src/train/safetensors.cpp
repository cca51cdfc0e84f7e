// safetensors reader and writer. The reader maps the file read-only and checks the whole header
// (lengths, JSON, dtypes, shapes, offsets, the checksum table) before any tensor byte is
// touched, so a damaged file produces an error that names it, never an over-read; tensor bytes
// are checked against their checksums before they are used.
#include "stoker/train/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "stoker/core/error.h"
#include "util/atomic_file.h"
#include "util/checksum.h"

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; big-endian hosts are not supported");

namespace stoker::train {

namespace {
using nlohmann::json;

// The Python implementation refuses headers above 100 MB; so do we (it bounds the allocation a
// hostile header length can cause).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

std::string quoted(const std::string& s) { return "'" + s + "'"; }

// 16 hex digits (as util::checksum_hex writes them) -> value; false for anything else.
bool parse_checksum_hex(const std::string& s, uint64_t& v) {
  if (s.size() != 16) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 16);
  return ec == std::errc() && end == s.data() + s.size();
}

constexpr std::string_view kPlaceholder = "0000000000000000";

// The bytes that precede the header checksum's value in a header: the key and `:"` with no
// whitespace, as stoker (and Python's safetensors) write JSON. Inside a JSON string a quote is
// escaped, so these bytes can only be the key itself.
std::string header_checksum_prefix() { return std::string("\"") + kHeaderChecksumKey + "\":\""; }

// The offset of the header checksum's 16 digits in `header` (the file's first bytes), or npos
// when the key is not found exactly once.
size_t find_header_checksum(std::string_view header) {
  const std::string prefix = header_checksum_prefix();
  const size_t at = header.find(prefix);
  if (at == std::string_view::npos || header.find(prefix, at + 1) != std::string_view::npos)
    return std::string_view::npos;
  return at + prefix.size();
}
}  // namespace

uint64_t safetensors_header_checksum(const unsigned char* file, size_t header_end,
                                     size_t value_at) {
  util::Checksum64 sum;
  sum.update(file, value_at);
  sum.update(kPlaceholder.data(), kPlaceholder.size());
  sum.update(file + value_at + kPlaceholder.size(), header_end - value_at - kPlaceholder.size());
  return sum.value();
}

namespace {
// Checks the header checksum, when the file has one, before anything else of the header is
// used; refuses a file whose version requires one that is missing. Returns whether it had one.
bool check_header_checksum(const std::string& file, const unsigned char* map, size_t header_end,
                           const json& header) {
  const auto meta = header.find("__metadata__");
  if (meta == header.end() || !meta->is_object()) return false;
  const std::string hint =
      "use an intact copy of the file or write it again; a tool that edits the header of a "
      "stoker file must drop stoker.header_checksum and stoker.safetensors_version (a "
      "training checkpoint cannot be edited: resume an earlier one)";
  const auto sum = meta->find(kHeaderChecksumKey);
  const auto version = meta->find(kSafetensorsVersionKey);
  if (sum == meta->end()) {
    if (version == meta->end()) return false;  // PyTorch's or an older stoker's file
    STOKER_CHECK_HINT(false, hint, file, ": metadata ", kSafetensorsVersionKey, " is ",
                      version->dump(), " but there is no ", kHeaderChecksumKey,
                      ": the header is damaged");
  }
  uint64_t stored = 0;
  // Lower-case only, as written: an upper-cased digit is an edited byte too.
  const bool lower = sum->is_string() && sum->get<std::string>().find_first_not_of(
                                             "0123456789abcdef") == std::string::npos;
  STOKER_CHECK_HINT(lower && parse_checksum_hex(sum->get<std::string>(), stored), hint, file,
                    ": metadata ", kHeaderChecksumKey, " is ", sum->dump(),
                    ", not 16 hex digits: the header is damaged");
  const size_t at =
      find_header_checksum(std::string_view(reinterpret_cast<const char*>(map), header_end));
  STOKER_CHECK_HINT(
      at != std::string_view::npos &&
          std::string_view(reinterpret_cast<const char*>(map) + at, 16) == sum->get<std::string>(),
      hint, file, ": metadata ", kHeaderChecksumKey, " is not written as stoker writes it (\"",
      kHeaderChecksumKey, "\":\"<16 hex digits>\", once): the header is damaged");
  const uint64_t computed = safetensors_header_checksum(map, header_end, at);
  STOKER_CHECK_HINT(computed == stored, hint, file, ": the header fails its checksum (stored ",
                    util::checksum_hex(stored), ", computed ", util::checksum_hex(computed),
                    "): the file is damaged (a byte of its metadata or tensor table changed)");
  // Checked, so the version is what the writer wrote: refuse one this build does not know.
  if (version != meta->end()) {
    int v = 0;
    const std::string text = version->is_string() ? version->get<std::string>() : "";
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    STOKER_CHECK_HINT(
        ec == std::errc() && end == text.data() + text.size() && v >= 1 && v <= kSafetensorsVersion,
        "read it with the (newer) stoker build that wrote it", file, ": metadata ",
        kSafetensorsVersionKey, " is ", version->dump(), "; this build reads 1 to ",
        kSafetensorsVersion);
  }
  return true;
}
}  // namespace

const char* safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "F32";
    case DType::f16:
      return "F16";
    case DType::bf16:
      return "BF16";
    case DType::i32:
      return "I32";
    case DType::i64:
      return "I64";
    case DType::u8:
      return "U8";
  }
  return "?";
}

DType parse_safetensors_dtype(const std::string& name, const std::string& context) {
  if (name == "F32") return DType::f32;
  if (name == "F16") return DType::f16;
  if (name == "BF16") return DType::bf16;
  if (name == "I32") return DType::i32;
  if (name == "I64") return DType::i64;
  if (name == "U8") return DType::u8;
  STOKER_THROW(context, ": unsupported dtype ", quoted(name),
               "; stoker reads F32, F16, BF16, I32, I64 and U8 (convert the tensor in Python, "
               "e.g. t.float(), before saving)");
}

void save_safetensors(const std::filesystem::path& path, std::span<const NamedTensor> tensors,
                      const std::map<std::string, std::string>& metadata,
                      const SafetensorsWriteOptions& options) {
  std::set<std::string> seen;
  std::vector<Tensor> host;
  json header = json::object();
  size_t offset = 0;
  for (const NamedTensor& nt : tensors) {
    STOKER_CHECK(!nt.name.empty() && nt.name != "__metadata__", "save_safetensors(", path.string(),
                 "): invalid tensor name ", quoted(nt.name));
    STOKER_CHECK(seen.insert(nt.name).second, "save_safetensors(", path.string(), "): tensor name ",
                 quoted(nt.name), " appears twice");
    STOKER_CHECK(nt.tensor.defined(), "save_safetensors(", path.string(), "): tensor ",
                 quoted(nt.name), " is undefined");
    host.push_back(nt.tensor.device().is_cpu() ? nt.tensor : nt.tensor.to(Device::cpu()));
    json shape = json::array();
    for (int64_t d : nt.tensor.shape().dims()) shape.push_back(d);
    header[nt.name] = {{"dtype", safetensors_dtype_name(nt.tensor.dtype())},
                       {"shape", shape},
                       {"data_offsets", {offset, offset + nt.tensor.nbytes()}}};
    offset += nt.tensor.nbytes();
  }
  std::map<std::string, std::string> meta = metadata;
  if (options.checksums) {
    // Over the host bytes, exactly what goes into the file.
    json sums = json::object();
    for (size_t i = 0; i < host.size(); ++i)
      sums[tensors[i].name] =
          util::checksum_hex(util::checksum64(host[i].data(), host[i].nbytes()));
    meta[kChecksumsKey] = sums.dump();
    meta[kHeaderChecksumKey] = std::string(kPlaceholder);
    meta[kSafetensorsVersionKey] = std::to_string(kSafetensorsVersion);
  } else {
    meta.erase(kHeaderChecksumKey);
    meta.erase(kSafetensorsVersionKey);
  }
  if (!meta.empty()) header["__metadata__"] = meta;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned
  const uint64_t n = text.size();
  if (options.checksums) {
    // Over the length and the header as they go into the file, the placeholder in place.
    std::string head(8, '\0');
    std::memcpy(head.data(), &n, 8);
    head += text;
    const size_t at = find_header_checksum(head);
    STOKER_CHECK(at != std::string::npos, "save_safetensors(", path.string(),
                 "): the header checksum key appears more than once");
    const std::string hex = util::checksum_hex(safetensors_header_checksum(
        reinterpret_cast<const unsigned char*>(head.data()), head.size(), at));
    text.replace(at - 8, hex.size(), hex);
  }

  util::write_file_atomically(path, [&](int fd) {
    util::write_all(fd, &n, sizeof n, path);
    util::write_all(fd, text.data(), text.size(), path);
    for (const Tensor& t : host) util::write_all(fd, t.data(), t.nbytes(), path);
  });
}

SafetensorsReader::SafetensorsReader(const std::filesystem::path& path) : path_(path) {
  const std::string file = path.string();
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  STOKER_CHECK_HINT(fd_ >= 0,
                    "check the path; weights are written by save_safetensors or "
                    "Python's safetensors.torch.save_file",
                    "cannot open safetensors file ", file, ": ", std::strerror(errno));
  try {
    struct stat st {};
    STOKER_CHECK(::fstat(fd_, &st) == 0, "cannot stat ", file, ": ", std::strerror(errno));
    file_size_ = static_cast<size_t>(st.st_size);
    STOKER_CHECK(file_size_ >= 8, file, " is truncated: ", file_size_,
                 " bytes, but a safetensors file starts with an 8-byte header length");
    map_ = static_cast<const unsigned char*>(
        ::mmap(nullptr, file_size_, PROT_READ, MAP_PRIVATE, fd_, 0));
    if (map_ == MAP_FAILED) {
      map_ = nullptr;
      STOKER_THROW("cannot map ", file, ": ", std::strerror(errno));
    }
    uint64_t header_len = 0;
    std::memcpy(&header_len, map_, 8);
    STOKER_CHECK(header_len <= file_size_ - 8, file, ": header length ", header_len,
                 " runs beyond the end of the file (", file_size_,
                 " bytes): the file is truncated or not a safetensors file");
    STOKER_CHECK(header_len <= kMaxHeaderBytes, file, ": header length ", header_len,
                 " exceeds the 100 MB limit: not a safetensors file");
    data_start_ = 8 + header_len;
    const size_t data_size = file_size_ - data_start_;

    json header;
    try {
      header = json::parse(map_ + 8, map_ + 8 + header_len);
    } catch (const json::exception& e) {
      STOKER_THROW(file, ": the header is not valid JSON (", e.what(), ")");
    }
    STOKER_CHECK(header.is_object(), file, ": the header must be a JSON object");
    has_header_checksum_ = check_header_checksum(file, map_, data_start_, header);

    std::vector<std::pair<size_t, std::string>> by_offset;
    for (auto it = header.begin(); it != header.end(); ++it) {
      const std::string& name = it.key();
      const json& v = it.value();
      if (name == "__metadata__") {
        STOKER_CHECK(v.is_object(), file, ": __metadata__ must be an object of strings");
        for (auto m = v.begin(); m != v.end(); ++m) {
          STOKER_CHECK(m.value().is_string(), file, ": __metadata__ value of ", quoted(m.key()),
                       " is not a string");
          metadata_[m.key()] = m.value().get<std::string>();
        }
        continue;
      }
      const std::string ctx = file + ", tensor " + quoted(name);
      STOKER_CHECK(
          v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"),
          ctx, ": entry must be an object with dtype, shape and data_offsets");
      STOKER_CHECK(v["dtype"].is_string(), ctx, ": dtype is not a string");
      Entry e;
      e.dtype = parse_safetensors_dtype(v["dtype"].get<std::string>(), ctx);
      const json& shape = v["shape"];
      STOKER_CHECK(shape.is_array() && shape.size() <= static_cast<size_t>(Shape::kMaxDims), ctx,
                   ": shape must be an array of at most ", Shape::kMaxDims, " extents");
      std::vector<int64_t> dims;
      unsigned __int128 numel = 1;
      for (const json& d : shape) {
        STOKER_CHECK(d.is_number_unsigned(), ctx, ": shape ", shape.dump(),
                     " has an extent that is not a non-negative integer");
        // Each extent on its own too: after a zero extent the product stays 0 whatever follows.
        STOKER_CHECK(d.get<uint64_t>() <= (uint64_t{1} << 62), ctx, ": shape ", shape.dump(),
                     " has an impossibly large extent");
        dims.push_back(d.get<int64_t>());
        numel *= d.get<uint64_t>();
        STOKER_CHECK(numel <= (static_cast<unsigned __int128>(1) << 62), ctx, ": shape ",
                     shape.dump(), " is impossibly large");
      }
      e.shape = Shape(std::span<const int64_t>(dims));
      const json& off = v["data_offsets"];
      STOKER_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() &&
                       off[1].is_number_unsigned(),
                   ctx, ": data_offsets must be two non-negative integers");
      const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
      STOKER_CHECK(begin <= end && end <= data_size, ctx, ": data_offsets [", begin, ", ", end,
                   "] lie outside the data section of ", data_size,
                   " bytes: the file is truncated or corrupt");
      const unsigned __int128 want = numel * dtype_size(e.dtype);
      STOKER_CHECK(want == end - begin, ctx, ": ", end - begin, " bytes stored but shape ",
                   shape.dump(), " of ", safetensors_dtype_name(e.dtype), " needs ",
                   static_cast<uint64_t>(want));
      e.begin = begin;
      e.end = end;
      entries_[name] = e;
      by_offset.emplace_back(begin, name);
    }
    // Like the reference implementation: tensors tile the data section without overlap or gap.
    std::sort(by_offset.begin(), by_offset.end(), [&](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first
                                : entries_[a.second].end < entries_[b.second].end;
    });
    size_t expected = 0;
    for (const auto& [begin, name] : by_offset) {
      STOKER_CHECK(begin == expected, file, ", tensor ", quoted(name), ": data starts at byte ",
                   begin, " but the previous tensor ends at ", expected,
                   begin < expected ? " (tensors overlap)" : " (gap in the data)");
      expected = entries_[name].end;
      names_.push_back(name);
    }
    STOKER_CHECK(expected == data_size, file, ": tensors cover ", expected,
                 " bytes but the data "
                 "section has ",
                 data_size, " (trailing bytes: corrupt or wrong header)");
    for (size_t i = 0; i < names_.size(); ++i) entries_[names_[i]].index = i;
    verified_ = std::make_unique<std::atomic<bool>[]>(names_.size());

    // The checksum table. Names it lists that the file lacks are ignored (a tool may have
    // dropped tensors and kept the metadata); a malformed table is a damaged header.
    if (const auto it = metadata_.find(kChecksumsKey); it != metadata_.end()) {
      const std::string ctx = file + ": metadata " + kChecksumsKey;
      json sums;
      try {
        sums = json::parse(it->second);
      } catch (const json::exception& e) {
        STOKER_THROW(ctx, " is not valid JSON (", e.what(), "): the header is damaged");
      }
      STOKER_CHECK(sums.is_object(), ctx, " is not a JSON object: the header is damaged");
      for (auto s = sums.begin(); s != sums.end(); ++s) {
        uint64_t v = 0;
        STOKER_CHECK(s.value().is_string() && parse_checksum_hex(s.value().get<std::string>(), v),
                     ctx, ": the checksum of ", quoted(s.key()), " is ", s.value().dump(),
                     ", not 16 hex digits: the header is damaged");
        const auto e = entries_.find(s.key());
        if (e == entries_.end()) continue;
        e->second.has_checksum = true;
        e->second.checksum = v;
      }
      has_checksums_ = true;
    }
  } catch (...) {
    if (map_) ::munmap(const_cast<unsigned char*>(map_), file_size_);
    ::close(fd_);
    throw;
  }
}

SafetensorsReader::~SafetensorsReader() {
  if (map_) ::munmap(const_cast<unsigned char*>(map_), file_size_);
  if (fd_ >= 0) ::close(fd_);
}

const SafetensorsReader::Entry& SafetensorsReader::entry(const std::string& name) const {
  const auto it = entries_.find(name);
  STOKER_CHECK(it != entries_.end(), path_.string(), " has no tensor ", quoted(name), " (it has ",
               names_.size(), " tensors", names_.empty() ? "" : ", e.g. " + quoted(names_[0]), ")");
  return it->second;
}

SafetensorsReader::ChecksumCheck SafetensorsReader::check_checksum(const std::string& name) const {
  const Entry& e = entry(name);
  ChecksumCheck c;
  if (!e.has_checksum) return c;
  c.stored = true;
  c.expected = e.checksum;
  if (verified_[e.index].load(std::memory_order_acquire)) {
    c.computed = e.checksum;
    return c;
  }
  c.computed = util::checksum64(map_ + data_start_ + e.begin, e.end - e.begin);
  if (c.ok()) verified_[e.index].store(true, std::memory_order_release);
  return c;
}

void SafetensorsReader::verify(const std::string& name) const {
  const ChecksumCheck c = check_checksum(name);
  STOKER_CHECK_HINT(c.ok(),
                    "use an intact copy of the file or write it again; a tool that changed "
                    "tensors but kept stoker's metadata must drop the keys stoker.checksums, "
                    "stoker.header_checksum and stoker.safetensors_version",
                    path_.string(), ": tensor ", quoted(name), " fails its checksum (stored ",
                    util::checksum_hex(c.expected), ", computed ", util::checksum_hex(c.computed),
                    "): the file is damaged");
}

Tensor SafetensorsReader::load(const std::string& name, Device device) const {
  const Entry& e = entry(name);
  Tensor t = Tensor::empty(e.shape, e.dtype, device);
  load_into(name, t);
  return t;
}

void SafetensorsReader::load_into(const std::string& name, const Tensor& dst) const {
  const Entry& e = entry(name);
  STOKER_CHECK(dst.defined() && dst.dtype() == e.dtype && dst.shape() == e.shape, path_.string(),
               ", tensor ", quoted(name), ": the file holds ", safetensors_dtype_name(e.dtype),
               e.shape.str(), " but the destination is ",
               dst.defined() ? dst.str() : std::string("undefined"));
  verify(name);
  if (dst.nbytes() == 0) return;
  if (dst.device().is_cpu()) {
    std::memcpy(dst.data(), map_ + data_start_ + e.begin, dst.nbytes());
    return;
  }
  Tensor host = Tensor::empty(e.shape, e.dtype, Device::cpu());
  std::memcpy(host.data(), map_ + data_start_ + e.begin, host.nbytes());
  core::detail::copy_bytes(dst, host);
}

std::vector<NamedTensor> load_safetensors(const std::filesystem::path& path, Device device) {
  const SafetensorsReader reader(path);
  std::vector<NamedTensor> out;
  for (const std::string& name : reader.names()) out.push_back({name, reader.load(name, device)});
  return out;
}

}  // namespace stoker::train
