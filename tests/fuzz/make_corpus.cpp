// Writes the seed corpora of the fuzz targets: tests/fuzz/corpus/<target>/, small real inputs
// made with the library's own writers (encode_record, save_safetensors, add_restart_markers,
// the rendezvous encoders) and TurboJPEG. Deterministic: running it again rewrites the same
// bytes. Build and run (any build with the tests):
//   cmake --build build/ci --target stoker_fuzz_make_corpus
//   build/ci/tests/fuzz/stoker_fuzz_make_corpus tests/fuzz/corpus
#include <turbojpeg.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/jpeg_restart.h"
#include "dist/rendezvous_message.h"
#include "stoker/core/tensor.h"
#include "stoker/data/lmdb_dataset.h"
#include "stoker/train/safetensors.h"

namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

void write(const fs::path& path, std::span<const uint8_t> bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + path.string());
  std::printf("%6zu %s\n", bytes.size(), path.c_str());
}

void write(const fs::path& path, const std::string& text) {
  write(path, std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

// Smooth colours with a little texture, `channels` bytes per pixel.
Bytes pixels(int w, int h, int channels) {
  Bytes p(static_cast<size_t>(w) * h * channels);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < channels; ++c)
        p[(static_cast<size_t>(y) * w + x) * channels + c] = static_cast<uint8_t>(
            127 + 100 * std::sin(0.2 * x + 0.3 * y + 1.7 * c) + ((x * 7 + y * 13 + c) % 5));
  return p;
}

Bytes encode_jpeg(int w, int h, int pixel_format, int subsamp, int quality, int flags = 0) {
  const int channels = tjPixelSize[pixel_format];
  const Bytes p = pixels(w, h, channels);
  tjhandle tj = tjInitCompress();
  if (tj == nullptr) throw std::runtime_error("tjInitCompress failed");
  unsigned char* out = nullptr;
  unsigned long size = 0;
  const int rc =
      tjCompress2(tj, p.data(), w, 0, h, pixel_format, &out, &size, subsamp, quality, flags);
  tjDestroy(tj);
  if (rc != 0) throw std::runtime_error("tjCompress2 failed");
  Bytes jpeg(out, out + size);
  tjFree(out);
  return jpeg;
}

Bytes with_restart_markers(const Bytes& jpeg) {
  Bytes out;
  const std::string why = stoker::data::detail::add_restart_markers(jpeg, out);
  if (!why.empty()) throw std::runtime_error("add_restart_markers: " + why);
  return out;
}

Bytes prefixed(uint8_t first, std::span<const uint8_t> rest) {
  Bytes b{first};
  b.insert(b.end(), rest.begin(), rest.end());
  return b;
}

void records(const fs::path& dir, const Bytes& small_jpeg) {
  using namespace stoker::data;
  auto record = [](int32_t label, std::span<const uint8_t> payload) {
    const std::string r = encode_record(label, PayloadKind::jpeg, payload);
    return Bytes(r.begin(), r.end());
  };
  const Bytes tiny = {0xFF, 0xD8, 0xFF, 0xD9};
  // First byte: num_classes (int8).
  write(dir / "v2_jpeg_label3_of10", prefixed(10, record(3, small_jpeg)));
  write(dir / "v2_tiny_label0_unchecked", prefixed(0, record(0, tiny)));
  write(dir / "v2_label_out_of_range", prefixed(2, record(5, tiny)));
  // Version 1: the same header without the checksum.
  Bytes v1 = record(7, tiny);
  v1.erase(v1.begin() + kRecordHeaderBytesV1, v1.begin() + kRecordHeaderBytes);
  v1[4] = kRecordVersionV1;
  write(dir / "v1_label7_of8", prefixed(8, v1));
  Bytes damaged = record(1, tiny);
  damaged.back() ^= 0x01;
  write(dir / "v2_checksum_mismatch", prefixed(4, damaged));
  Bytes truncated = record(1, small_jpeg);
  truncated.resize(truncated.size() / 2);
  write(dir / "v2_truncated", prefixed(4, truncated));
}

void safetensors(const fs::path& dir) {
  using stoker::Tensor;
  using stoker::core::DType;
  using stoker::train::NamedTensor;
  const fs::path scratch =
      fs::temp_directory_path() / ("stoker-make-corpus-" + std::to_string(::getpid()) + ".st");
  auto save = [&](const std::string& name, const std::vector<NamedTensor>& tensors,
                  const std::map<std::string, std::string>& meta, bool checksums) {
    stoker::train::SafetensorsWriteOptions o;
    o.checksums = checksums;
    stoker::train::save_safetensors(scratch, tensors, meta, o);
    std::ifstream f(scratch, std::ios::binary);
    const Bytes bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    fs::remove(scratch);
    write(dir / name, bytes);
  };
  const std::vector<NamedTensor> mixed = {
      {"weight", Tensor::from_floats({1, -2, 3.5f, 0, 1e-3f, 7}, {2, 3})},
      {"bias", Tensor::from_floats({0.5f, -0.25f, 2, 4}, {4}, DType::bf16)},
      {"step", Tensor::from_vector<int64_t>({42}, stoker::Shape{})},
      {"empty", Tensor::from_vector<uint8_t>({}, {0})},
  };
  save("mixed_checksums", mixed, {{"format", "stoker"}, {"step", "42"}}, true);
  save("mixed_no_checksums", mixed, {{"format", "stoker"}}, false);
  save("i32_rank3", {{"ids", Tensor::from_vector<int32_t>({1, 2, 3, 4, 5, 6}, {3, 1, 2})}}, {},
       false);
  save("f16_one", {{"h", Tensor::from_floats({1, 2, 3, 4, 5}, {5}, DType::f16)}}, {}, true);
}

void jpegs(const fs::path& dir) {
  write(dir / "rgb_16x16_420.jpg", encode_jpeg(16, 16, TJPF_RGB, TJSAMP_420, 90));
  write(dir / "rgb_33x17_444.jpg", encode_jpeg(33, 17, TJPF_RGB, TJSAMP_444, 80));
  write(dir / "rgb_24x40_422.jpg", encode_jpeg(24, 40, TJPF_RGB, TJSAMP_422, 75));
  write(dir / "gray_20x12.jpg", encode_jpeg(20, 12, TJPF_GRAY, TJSAMP_GRAY, 85));
  write(dir / "cmyk_16x8.jpg", encode_jpeg(16, 8, TJPF_CMYK, TJSAMP_444, 90));
  write(dir / "rgb_24x24_420_progressive.jpg",
        encode_jpeg(24, 24, TJPF_RGB, TJSAMP_420, 85, TJFLAG_PROGRESSIVE));
  // Restart markers as `stoker pack` writes them: a grid of tiles (here 2 x 2 and 3 x 4).
  write(dir / "rgb_128x32_420_restart.jpg",
        with_restart_markers(encode_jpeg(128, 32, TJPF_RGB, TJSAMP_420, 70)));
  write(dir / "rgb_96x32_444_restart.jpg",
        with_restart_markers(encode_jpeg(96, 32, TJPF_RGB, TJSAMP_444, 60)));
  write(dir / "gray_64x24_restart.jpg",
        with_restart_markers(encode_jpeg(64, 24, TJPF_GRAY, TJSAMP_GRAY, 70)));
}

void lists(const fs::path& dir) {
  write(dir / "simple.list", "a.jpg 0\nb.jpg 1\nclass 2/c d.jpg 2\n");
  write(dir / "comments_blank_crlf.list",
        "# images of the test set\r\n\r\n  train/x.jpg\t3\r\n/abs/y.jpg  0\r\n#end\r\n");
  write(dir / "bom_tabs.list", "\xEF\xBB\xBFimg one.jpg\t\t10\n\timg two.jpg 0  \n");
  write(dir / "bad_label.list", "a.jpg 0\nb.jpg -1\n");
  write(dir / "one_field.list", "a.jpg\n");
  write(dir / "huge_label.list", "a.jpg 99999999999\n");
}

void rendezvous(const fs::path& dir) {
  using namespace stoker::dist::detail;
  // First byte: the message kind (even: hello, odd: reply).
  write(dir / "hello_rank1_of2", prefixed(0, encode_rendezvous_hello(3, 1, 2)));
  write(dir / "hello_rank7_of8_nccl", prefixed(0, encode_rendezvous_hello(2, 7, 8)));
  auto reply = [](uint16_t status, const std::string& body) {
    const auto h = encode_rendezvous_reply_header(status, static_cast<uint32_t>(body.size()));
    Bytes b{1};
    b.insert(b.end(), h.begin(), h.end());
    b.insert(b.end(), body.begin(), body.end());
    return b;
  };
  write(dir / "reply_ok_empty", reply(0, ""));
  write(dir / "reply_ok_128", reply(0, std::string(128, '\x5a')));
  write(dir / "reply_refused", reply(1, "rank 1 was told WORLD_SIZE=4 but rank 0 WORLD_SIZE=2"));
  const std::string http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  write(dir / "http_request",
        prefixed(0, std::span(reinterpret_cast<const uint8_t*>(http.data()), http.size())));
  Bytes v2 = prefixed(1, encode_rendezvous_reply_header(0, 4));
  v2[5] = 2;  // another protocol version
  write(dir / "reply_version2", v2);
}

// Page damages for the lmdb target: 4 bytes each (page selector: 0, 1 the meta pages, k >= 2 the
// (k - 2)-th live page, the root first; offset in the page, little-endian; the byte written).
void lmdb_damages(const fs::path& dir) {
  struct Damage {
    uint8_t page;
    uint16_t offset;
    uint8_t value;
  };
  auto damages = [](std::initializer_list<Damage> list) {
    Bytes b;
    for (const Damage& d : list) {
      b.insert(b.end(), {d.page, static_cast<uint8_t>(d.offset & 0xFF),
                         static_cast<uint8_t>(d.offset >> 8), d.value});
    }
    return b;
  };
  write(dir / "intact", Bytes{});
  write(dir / "root_flags_cleared", damages({{2, 10, 0x00}}));
  write(dir / "leaf_node_count_high", damages({{3, 13, 0xFF}}));
  write(dir / "leaf_upper_cleared", damages({{4, 14, 0x00}, {4, 15, 0x00}}));
  write(dir / "leaf_first_node_offset", damages({{5, 16, 0xF0}, {5, 17, 0x0F}}));
  write(dir / "leaf_node_size", damages({{6, 2050, 0x7F}, {7, 3000, 0x80}}));
  write(dir / "meta_root_moved", damages({{0, 128, 0x03}, {1, 128, 0x03}}));
  write(dir / "meta_depth", damages({{0, 94, 0x09}, {1, 94, 0x09}}));
  write(dir / "many_pages", damages({{8, 12, 0x11},
                                     {9, 10, 0x04},
                                     {10, 12, 0x00},
                                     {11, 8, 0x01},
                                     {12, 20, 0xFF},
                                     {13, 4000, 0x00}}));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus folder, e.g. tests/fuzz/corpus>\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  const Bytes small_jpeg = encode_jpeg(8, 8, TJPF_RGB, TJSAMP_420, 50);
  records(root / "record", small_jpeg);
  safetensors(root / "safetensors");
  jpegs(root / "jpeg");
  lists(root / "list");
  rendezvous(root / "rendezvous");
  lmdb_damages(root / "lmdb");
  return 0;
}
