// JpegDecoder on libjpeg-turbo's libjpeg API (the only API that has jpeg_crop_scanline and
// jpeg_skip_scanlines in the 2.1.x the distributions ship).
//
// Error handling: libjpeg reports errors by calling error_exit, which must not return; we
// longjmp back to the guarded function, abort the decompressor (it stays reusable) and throw
// a DecodeError. Warnings (corrupt entropy data, a file that ends early — libjpeg pads it with
// grey and carries on) take the same path unless options.warnings_are_errors is off. Each
// guarded function calls setjmp itself and keeps no C++ objects with destructors in its frame,
// so the longjmp never skips a destructor; all buffers are members of Impl.
#include "stoker/data/decode.h"

#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE and size_t first
// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include <fmt/format.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "data/jpeg_restart.h"
#include "data/resize.h"

namespace stoker::data {

namespace {

// Pixels decoded beyond a needed window wherever its edge is not the image's: a cropped decode
// (jpeg_crop_scanline) or a slice of restart tiles upsamples chroma against its own edge, and a
// used pixel's chroma neighbour is at most 2 pixels away.
constexpr int kChromaMargin = 2;

constexpr const char* kCorruptHint =
    "the sample's bytes are not a valid, complete JPEG: re-encode it and re-pack the dataset "
    "(stoker pack), or let the loader skip corrupt samples";

struct ErrorManager {
  jpeg_error_mgr pub;  // first member: libjpeg sees only this
  jmp_buf jump;
  bool warnings_are_errors = true;
  bool is_warning = false;
  char message[JMSG_LENGTH_MAX];
};

void on_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  err->is_warning = false;
  (*cinfo->err->format_message)(cinfo, err->message);
  longjmp(err->jump, 1);
}

void on_emit_message(j_common_ptr cinfo, int level) {
  if (level >= 0) return;  // trace messages
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  cinfo->err->num_warnings++;
  if (!err->warnings_are_errors) return;
  err->is_warning = true;
  (*cinfo->err->format_message)(cinfo, err->message);
  longjmp(err->jump, 1);
}

void on_output_message(j_common_ptr) {}  // never print to stderr

using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string quoted_key(std::string_view key) {
  if (key.empty()) return "(no key)";
  std::string s;
  s.reserve(key.size() + 2);
  s.push_back('\'');
  s.append(key);
  s.push_back('\'');
  return s;
}

[[noreturn]] void fail(std::string_view key, std::string reason, int line,
                       std::string hint = kCorruptHint) {
  std::string what = "JPEG decode failed for sample " + quoted_key(key) + ": " + reason;
  throw DecodeError(std::string(key), std::move(reason), std::move(what),
                    core::detail::where(__FILE__, line), std::move(hint));
}

// What the first bytes look like when they are not a JPEG.
std::string describe_magic(std::span<const uint8_t> b) {
  char hex[16];
  std::string s = "starts with";
  for (size_t i = 0; i < std::min<size_t>(b.size(), 4); ++i) {
    std::snprintf(hex, sizeof hex, " %02X", b[i]);
    s += hex;
  }
  s += " (a JPEG starts with FF D8)";
  auto has = [&](size_t at, const char* magic) {
    const size_t n = std::strlen(magic);
    return b.size() >= at + n && std::memcmp(b.data() + at, magic, n) == 0;
  };
  if (has(0, "\x89PNG")) s += "; it looks like a PNG";
  if (has(0, "GIF8")) s += "; it looks like a GIF";
  if (has(0, "RIFF") && has(8, "WEBP")) s += "; it looks like a WebP";
  if (has(0, "BM")) s += "; it may be a BMP";
  return s;
}

// Adobe CMYK JPEGs store inverted values (Photoshop convention, signalled by the Adobe
// marker): there R = C*K/255. Otherwise R = (255-C)(255-K)/255.
void cmyk_to_rgb(const uint8_t* in, uint8_t* out, int n, bool inverted) {
  for (int i = 0; i < n; ++i, in += 4, out += 3) {
    int c = in[0], m = in[1], y = in[2], k = in[3];
    if (!inverted) {
      c = 255 - c;
      m = 255 - m;
      y = 255 - y;
      k = 255 - k;
    }
    out[0] = static_cast<uint8_t>((c * k + 127) / 255);
    out[1] = static_cast<uint8_t>((m * k + 127) / 255);
    out[2] = static_cast<uint8_t>((y * k + 127) / 255);
  }
}

// The standard Huffman tables (JPEG Annex K), which libjpeg gives a decompressor whose slots
// 0 and 1 are still empty when decoding starts. Taken from a compressor's defaults, so they are
// libjpeg's own.
struct StandardHuffmanTables {
  JHUFF_TBL dc[2];
  JHUFF_TBL ac[2];
};

const StandardHuffmanTables& standard_huffman_tables() {
  static const StandardHuffmanTables tables = [] {
    StandardHuffmanTables t{};
    jpeg_compress_struct c{};
    jpeg_error_mgr err{};
    c.err = jpeg_std_error(&err);
    jpeg_create_compress(&c);
    c.in_color_space = JCS_RGB;
    c.input_components = 3;
    jpeg_set_defaults(&c);
    for (int k = 0; k < 2; ++k) {
      t.dc[k] = *c.dc_huff_tbl_ptrs[k];
      t.ac[k] = *c.ac_huff_tbl_ptrs[k];
    }
    jpeg_destroy_compress(&c);
    return t;
  }();
  return tables;
}

// A reused decompressor keeps the tables of the JPEGs it decoded before (they live in its
// permanent pool), and a JPEG that does not define a table it uses would be decoded with them:
// its pixels would depend on which image the thread decoded last. Before each header, put the
// tables back to what a new decompressor has: the standard Huffman tables in slots 0 and 1, no
// Huffman table elsewhere (zero codes: any use is "bad Huffman code", an error) and no
// quantization table (a DC quantizer of 0, refused by check_quant_tables). Pointers are kept:
// setting them to null would make libjpeg allocate anew for every image, never freeing.
void reset_tables(jpeg_decompress_struct& cinfo) {
  const StandardHuffmanTables& std_tables = standard_huffman_tables();
  for (int k = 0; k < NUM_HUFF_TBLS; ++k) {
    for (JHUFF_TBL* t : {cinfo.dc_huff_tbl_ptrs[k], cinfo.ac_huff_tbl_ptrs[k]}) {
      if (t == nullptr) continue;
      if (k < 2) {
        const JHUFF_TBL& src = t == cinfo.dc_huff_tbl_ptrs[k] ? std_tables.dc[k] : std_tables.ac[k];
        std::memcpy(t->bits, src.bits, sizeof(t->bits));
        std::memcpy(t->huffval, src.huffval, sizeof(t->huffval));
      } else {
        std::memset(t->bits, 0, sizeof(t->bits));
      }
    }
  }
  for (int k = 0; k < NUM_QUANT_TBLS; ++k) {
    if (cinfo.quant_tbl_ptrs[k] != nullptr) cinfo.quant_tbl_ptrs[k]->quantval[0] = 0;
  }
}

}  // namespace

struct JpegDecoder::Impl {
  DecoderOptions options;
  jpeg_decompress_struct cinfo{};
  ErrorManager err{};
  bool created = false;
  int last_scale = 8;
  DecodeStageTimes times;
  std::vector<uint8_t> pixels;     // decoded rows (crop window or the full image)
  std::vector<uint8_t> cmyk_rows;  // 4-channel rows before conversion
  std::vector<JSAMPROW> row_ptrs;
  Resizer resizer;
  detail::RestartTiles tiles;
  std::vector<uint8_t> slice;  // the tiles a crop needs, as a JPEG

  [[noreturn]] void fail_from_libjpeg(std::string_view key) {
    jpeg_abort_decompress(&cinfo);
    std::string reason = err.message;
    if (err.pub.msg_code == JWRN_JPEG_EOF) reason = "truncated: " + reason;
    if (err.is_warning) reason += " (libjpeg warning, treated as an error)";
    fail(key, std::move(reason), __LINE__);
  }

  static void check_magic(std::span<const uint8_t> bytes, std::string_view key) {
    if (bytes.empty())
      fail(key, "empty input (0 bytes)", __LINE__,
           "the dataset holds an empty value for this key: re-pack it");
    if (bytes.size() < 2 || bytes[0] != 0xFF || bytes[1] != 0xD8) {
      fail(key, "not a JPEG: " + describe_magic(bytes), __LINE__,
           "stoker decodes JPEG only: convert the image (e.g. `convert x.png x.jpg`) and re-pack");
    }
  }

  // Leaves the decompressor after jpeg_read_header, the image within the pixel budget.
  void read_header(std::span<const uint8_t> bytes, std::string_view key) {
    check_magic(bytes, key);
    if (setjmp(err.jump)) fail_from_libjpeg(key);
    jpeg_abort_decompress(&cinfo);  // whatever state the last call left
    reset_tables(cinfo);
    jpeg_mem_src(&cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
    jpeg_read_header(&cinfo, TRUE);
    check_quant_tables(key);
    const int64_t pixels_claimed = int64_t{cinfo.image_width} * cinfo.image_height;
    if (pixels_claimed > options.max_pixels || cinfo.image_width == 0 || cinfo.image_height == 0) {
      jpeg_abort_decompress(&cinfo);
      fail(key,
           fmt::format("header claims {}x{} = {} pixels, over the budget of {}", cinfo.image_width,
                       cinfo.image_height, pixels_claimed, options.max_pixels),
           __LINE__,
           "the header is corrupt or the image is huge: raise DecoderOptions::max_pixels if such "
           "images are expected");
    }
    configure();
  }

  // Every component's quantization table was defined by this JPEG (reset_tables left a 0 DC
  // quantizer in any other; a JPEG that stores 0 there is corrupt: it would decode as flat grey).
  void check_quant_tables(std::string_view key) {
    for (int c = 0; c < cinfo.num_components; ++c) {
      const int q = cinfo.comp_info[c].quant_tbl_no;
      const JQUANT_TBL* t = q >= 0 && q < NUM_QUANT_TBLS ? cinfo.quant_tbl_ptrs[q] : nullptr;
      if (t == nullptr || t->quantval[0] == 0) {
        jpeg_abort_decompress(&cinfo);
        fail(key,
             fmt::format("component {} uses quantization table {}, which this JPEG does not define "
                         "(or defines with a DC value of 0)",
                         c, q),
             __LINE__);
      }
    }
  }

  void configure() {
    const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
    cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_EXT_RGB;
    cinfo.dct_method = options.fast_dct ? JDCT_IFAST : JDCT_ISLOW;
  }

  // Reads rows [first, first + n) of the current output (after start/crop/skip) into pixels as
  // RGB rows of `width` pixels.
  void read_rows(int n, int width) {
    const bool cmyk = cinfo.out_color_space == JCS_CMYK;
    const size_t rgb_stride = static_cast<size_t>(width) * 3;
    const size_t in_stride = cmyk ? static_cast<size_t>(width) * 4 : rgb_stride;
    uint8_t* base = pixels.data();
    if (cmyk) base = cmyk_rows.data();
    int done = 0;
    while (done < n) {
      const int chunk = std::min(n - done, static_cast<int>(row_ptrs.size()));
      for (int i = 0; i < chunk; ++i) {
        row_ptrs[i] = cmyk ? base + static_cast<size_t>(i) * in_stride
                           : base + static_cast<size_t>(done + i) * in_stride;
      }
      const int got = static_cast<int>(jpeg_read_scanlines(&cinfo, row_ptrs.data(), chunk));
      if (got <= 0) {
        std::snprintf(err.message, sizeof err.message, "libjpeg returned no rows at row %u",
                      cinfo.output_scanline);
        err.is_warning = false;
        err.pub.msg_code = 0;
        longjmp(err.jump, 1);
      }
      if (cmyk) {
        for (int i = 0; i < got; ++i) {
          cmyk_to_rgb(base + static_cast<size_t>(i) * in_stride,
                      pixels.data() + static_cast<size_t>(done + i) * rgb_stride, width,
                      cinfo.saw_Adobe_marker);
        }
      }
      done += got;
    }
  }

  void prepare_buffers(int rows, int width) {
    pixels.resize(static_cast<size_t>(rows) * width * 3);
    const int batch = std::max(1, std::min(rows, 16));
    row_ptrs.resize(batch);
    if (cinfo.out_color_space == JCS_CMYK) cmyk_rows.resize(static_cast<size_t>(batch) * width * 4);
  }

  void decode_full_guarded(std::string_view key) {
    if (setjmp(err.jump)) fail_from_libjpeg(key);
    jpeg_start_decompress(&cinfo);
    const int w = static_cast<int>(cinfo.output_width);
    const int h = static_cast<int>(cinfo.output_height);
    prepare_buffers(h, w);
    read_rows(h, w);
    jpeg_finish_decompress(&cinfo);
  }

  // Decodes the source window the resizer (already prepared on the scaled image) needs.
  // Returns the window's view of `pixels`.
  RgbView decode_window_guarded(std::string_view key, const CropRect& crop, int out_w, int out_h,
                                int scale_num) {
    if (setjmp(err.jump)) fail_from_libjpeg(key);
    cinfo.scale_num = static_cast<unsigned>(scale_num);
    cinfo.scale_denom = 8;
    jpeg_start_decompress(&cinfo);
    const int sw = static_cast<int>(cinfo.output_width);
    const int sh = static_cast<int>(cinfo.output_height);
    const double s = scale_num / 8.0;
    // The scaled image is ceil(W*M/8) wide: the scaled crop always lies inside it.
    resizer.prepare(sw, sh, crop.x * s, crop.y * s, std::min(crop.width * s, sw - crop.x * s),
                    std::min(crop.height * s, sh - crop.y * s), out_w, out_h);
    const AxisWeights& wx = resizer.x_weights();
    const AxisWeights& wy = resizer.y_weights();
    return read_window(wx.min_index, wx.max_index, wy.min_index, wy.max_index, 0, 0);
  }

  // Decodes `slice` (tiles of the image whose pixel (ox, oy) is the slice's (0, 0)) for the
  // window columns [x_lo, x_hi], rows [y_lo, y_hi] of the image the resizer is prepared on.
  RgbView decode_slice_guarded(std::string_view key, int x_lo, int x_hi, int y_lo, int y_hi, int ox,
                               int oy) {
    if (setjmp(err.jump)) fail_from_libjpeg(key);
    jpeg_abort_decompress(&cinfo);
    jpeg_mem_src(&cinfo, slice.data(), static_cast<unsigned long>(slice.size()));
    jpeg_read_header(&cinfo, TRUE);
    configure();
    jpeg_start_decompress(&cinfo);
    return read_window(x_lo - ox, x_hi - ox, y_lo - oy, y_hi - oy, ox, oy);
  }

  // After jpeg_start_decompress: decodes columns [x_lo, x_hi] and rows [y_lo, y_hi] of the
  // decompressor's output (its pixel (0, 0) is image pixel (ox, oy)). Only called from a guarded
  // function (libjpeg errors longjmp to its setjmp).
  RgbView read_window(int x_lo, int x_hi, int y_lo, int y_hi, int ox, int oy) {
    const int sw = static_cast<int>(cinfo.output_width);
    // Chroma upsampling treats the edges of a cropped decode as image edges: decode 2 more
    // columns on each side (a used pixel's chroma neighbour) so the columns we use match a full
    // decode exactly (tested against full decode -> resize for every subsampling, crops starting
    // on and next to iMCU boundaries included).
    const int right = std::min(sw - 1, x_hi + kChromaMargin);
    const int left = std::max(0, x_lo - kChromaMargin);
    JDIMENSION x0 = static_cast<JDIMENSION>(left);
    JDIMENSION width = static_cast<JDIMENSION>(right - left + 1);
    if (static_cast<int>(width) < sw) jpeg_crop_scanline(&cinfo, &x0, &width);  // widens to iMCU
    const int y0 = y_lo;
    const int rows = y_hi - y_lo + 1;
    prepare_buffers(rows, static_cast<int>(width));
    if (y0 > 0) {
      const JDIMENSION skipped = jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(y0));
      if (static_cast<int>(skipped) != y0) {
        std::snprintf(err.message, sizeof err.message, "could skip only %u of %d rows", skipped,
                      y0);
        err.is_warning = false;
        err.pub.msg_code = 0;
        longjmp(err.jump, 1);
      }
    }
    read_rows(rows, static_cast<int>(width));
    if (cinfo.output_scanline < cinfo.output_height) {
      jpeg_abort_decompress(&cinfo);  // rows below the crop are never decoded
    } else {
      jpeg_finish_decompress(&cinfo);
    }
    return RgbView{pixels.data(),
                   static_cast<int>(width),
                   rows,
                   static_cast<size_t>(width) * 3,
                   static_cast<int>(x0) + ox,
                   y0 + oy};
  }
};

JpegDecoder::JpegDecoder(DecoderOptions options) : impl_(std::make_unique<Impl>()) {
  STOKER_CHECK(options.max_pixels > 0, "JpegDecoder: max_pixels must be positive, got ",
               options.max_pixels);
  Impl& d = *impl_;
  d.options = options;
  d.cinfo.err = jpeg_std_error(&d.err.pub);
  d.err.pub.error_exit = on_error_exit;
  d.err.pub.emit_message = on_emit_message;
  d.err.pub.output_message = on_output_message;
  d.err.warnings_are_errors = options.warnings_are_errors;
  if (setjmp(d.err.jump)) {
    STOKER_THROW("JpegDecoder: could not create a libjpeg decompressor: ", d.err.message);
  }
  jpeg_create_decompress(&d.cinfo);
  d.created = true;
}

JpegDecoder::~JpegDecoder() {
  if (impl_ && impl_->created) jpeg_destroy_decompress(&impl_->cinfo);
}

JpegInfo JpegDecoder::read_header(std::span<const uint8_t> bytes, std::string_view key) {
  Impl& d = *impl_;
  const auto t0 = Clock::now();
  d.read_header(bytes, key);
  d.times.header_s += seconds(t0, Clock::now());
  JpegInfo info;
  info.width = static_cast<int>(d.cinfo.image_width);
  info.height = static_cast<int>(d.cinfo.image_height);
  info.components = d.cinfo.num_components;
  info.progressive = d.cinfo.progressive_mode;
  jpeg_abort_decompress(&d.cinfo);
  return info;
}

Image JpegDecoder::decode_full(std::span<const uint8_t> bytes, std::string_view key) {
  Image image;
  decode_full_into(bytes, image, key);
  return image;
}

void JpegDecoder::decode_full_into(std::span<const uint8_t> bytes, Image& out,
                                   std::string_view key) {
  Impl& d = *impl_;
  const auto t0 = Clock::now();
  d.read_header(bytes, key);
  const auto t1 = Clock::now();
  d.times.header_s += seconds(t0, t1);
  d.pixels.swap(out.pixels);  // decode into the caller's storage
  try {
    d.decode_full_guarded(key);
  } catch (...) {
    d.pixels.swap(out.pixels);
    throw;
  }
  d.pixels.swap(out.pixels);
  d.times.decode_s += seconds(t1, Clock::now());
  ++d.times.images;
  out.width = static_cast<int>(d.cinfo.output_width);
  out.height = static_cast<int>(d.cinfo.output_height);
}

void JpegDecoder::decode_crop(std::span<const uint8_t> bytes, const CropRect& crop, int out_w,
                              int out_h, uint8_t* dst, std::string_view key, bool flip) {
  STOKER_CHECK(out_w > 0 && out_h > 0 && dst != nullptr, "decode_crop: bad output ", out_w, "x",
               out_h, " (dst ", static_cast<const void*>(dst), ") for sample ", quoted_key(key));
  Impl& d = *impl_;
  const RgbView window = decode_window(bytes, crop, out_w, out_h, key);
  const auto t0 = Clock::now();
  d.resizer.resize_prepared(window, dst, flip);
  d.times.resize_s += seconds(t0, Clock::now());
  ++d.times.images;
}

std::pair<int, int> JpegDecoder::decode_crop_window(std::span<const uint8_t> bytes,
                                                    const CropRect& crop, int out_w, int out_h,
                                                    std::string_view key) {
  STOKER_CHECK(out_w > 0 && out_h > 0, "decode_crop_window: bad output ", out_w, "x", out_h,
               " for sample ", quoted_key(key));
  const RgbView window = decode_window(bytes, crop, out_w, out_h, key);
  ++impl_->times.images;
  return {window.width, window.height};
}

// Header, crop check, DCT scale choice and the decode of the window the resize will read.
RgbView JpegDecoder::decode_window(std::span<const uint8_t> bytes, const CropRect& crop, int out_w,
                                   int out_h, std::string_view key) {
  Impl& d = *impl_;
  const auto t0 = Clock::now();
  d.read_header(bytes, key);
  const auto t1 = Clock::now();
  d.times.header_s += seconds(t0, t1);
  const double w = d.cinfo.image_width, h = d.cinfo.image_height;
  constexpr double kEps = 1e-6;
  if (!(crop.width > 0 && crop.height > 0 && crop.x >= -kEps && crop.y >= -kEps &&
        crop.x + crop.width <= w + kEps && crop.y + crop.height <= h + kEps)) {
    jpeg_abort_decompress(&d.cinfo);
    STOKER_THROW("decode_crop: crop (x ", crop.x, ", y ", crop.y, ", ", crop.width, "x",
                 crop.height, ") is not inside the ", w, "x", h, " image of sample ",
                 quoted_key(key));
  }
  CropRect c = crop;
  c.x = std::max(0.0, c.x);
  c.y = std::max(0.0, c.y);
  c.width = std::min(c.width, w - c.x);
  c.height = std::min(c.height, h - c.y);
  // Largest reduction that keeps the scaled crop at least the output size, used only when the
  // crop is at least twice the output in both directions.
  int scale_num = 8;
  if (d.options.dct_scaling && c.width >= 2.0 * out_w && c.height >= 2.0 * out_h) {
    for (int m = 1; m <= 8; ++m) {
      if (c.width * m / 8 >= out_w && c.height * m / 8 >= out_h) {
        scale_num = m;
        break;
      }
    }
  }
  d.last_scale = scale_num;
  if (scale_num == 8 && d.options.restart_tiles && d.cinfo.restart_interval > 0 &&
      d.tiles.parse(bytes)) {
    // The tiles around the window the resize reads, with 2 pixels of margin where a tile edge
    // is not the image's (chroma upsampling there sees an edge, not the next chroma sample).
    d.resizer.prepare(d.tiles.width(), d.tiles.height(), c.x, c.y, c.width, c.height, out_w, out_h);
    const AxisWeights& wx = d.resizer.x_weights();
    const AxisWeights& wy = d.resizer.y_weights();
    const int tw = d.tiles.tile_width(), th = d.tiles.tile_height();
    const int col0 = std::max(0, wx.min_index - kChromaMargin) / tw;
    const int col1 = std::min(d.tiles.width() - 1, wx.max_index + kChromaMargin) / tw;
    const int row0 = std::max(0, wy.min_index - kChromaMargin) / th;
    const int row1 = std::min(d.tiles.height() - 1, wy.max_index + kChromaMargin) / th;
    if (d.tiles.slice(bytes, col0, col1, row0, row1, d.slice)) {
      const RgbView window = d.decode_slice_guarded(key, wx.min_index, wx.max_index, wy.min_index,
                                                    wy.max_index, col0 * tw, row0 * th);
      d.times.decode_s += seconds(t1, Clock::now());
      ++d.times.tiled;
      return window;
    }
  }
  const RgbView window = d.decode_window_guarded(key, c, out_w, out_h, scale_num);
  d.times.decode_s += seconds(t1, Clock::now());
  return window;
}

int JpegDecoder::last_scale_num() const { return impl_->last_scale; }
const DecodeStageTimes& JpegDecoder::stage_times() const { return impl_->times; }
const DecoderOptions& JpegDecoder::options() const { return impl_->options; }

}  // namespace stoker::data
