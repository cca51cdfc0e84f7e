#include "data/jpeg_restart.h"

#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE and size_t first
#include <cstdlib>
#include <cstring>
// clang-format off
#include <jpeglib.h>
// clang-format on

#include <algorithm>
#include <memory>

namespace stoker::data::detail {

int restart_interval_for(int mcus_per_row) {
  for (int d : {4, 3, 5, 2, 6, 8, 7}) {
    if (d <= mcus_per_row && mcus_per_row % d == 0) return d;
  }
  return 1;
}

namespace {

struct Failure {
  jpeg_error_mgr pub;  // first member: libjpeg sees only this
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void on_error(j_common_ptr cinfo) {
  auto* f = reinterpret_cast<Failure*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, f->message);
  longjmp(f->jump, 1);
}

// Warnings (corrupt data, early end) fail the transcode: it must be lossless.
void on_message(j_common_ptr cinfo, int level) {
  if (level < 0) on_error(cinfo);
}

void on_output(j_common_ptr) {}

// Everything the transcode touches lives here (not in the guarded frame), so a longjmp out of
// libjpeg skips no destructor.
struct Transcoder {
  jpeg_decompress_struct src{};
  jpeg_compress_struct dst{};
  Failure failure{};
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  bool src_made = false, dst_made = false;

  ~Transcoder() {
    if (dst_made) jpeg_destroy_compress(&dst);
    if (src_made) jpeg_destroy_decompress(&src);
    std::free(buffer);
  }

  bool run(const uint8_t* data, size_t bytes) {
    if (setjmp(failure.jump)) return false;
    src.err = jpeg_std_error(&failure.pub);
    failure.pub.error_exit = on_error;
    failure.pub.emit_message = on_message;
    failure.pub.output_message = on_output;
    jpeg_create_decompress(&src);
    src_made = true;
    dst.err = &failure.pub;
    jpeg_create_compress(&dst);
    dst_made = true;
    jpeg_mem_src(&src, data, static_cast<unsigned long>(bytes));
    jpeg_save_markers(&src, JPEG_COM, 0xFFFF);
    for (int m = 0; m < 16; ++m) jpeg_save_markers(&src, JPEG_APP0 + m, 0xFFFF);
    jpeg_read_header(&src, TRUE);
    jvirt_barray_ptr* coefficients = jpeg_read_coefficients(&src);
    jpeg_copy_critical_parameters(&src, &dst);  // sequential Huffman unless asked otherwise
    // jpeg_copy_critical_parameters turns the Adobe marker on for 4-component files, but its
    // presence decides how CMYK values are read (inverted or not): keep the input's choice.
    dst.write_Adobe_marker = src.saw_Adobe_marker;
    // One interleaved scan (or one component): an MCU is max_h_samp_factor blocks wide.
    int h_max = 1;
    for (int c = 0; c < dst.num_components; ++c)
      h_max = std::max(h_max, dst.comp_info[c].h_samp_factor);
    const int mcu_w = dst.num_components == 1 ? 8 : 8 * h_max;
    const int mcus_per_row = static_cast<int>((dst.image_width + mcu_w - 1) / mcu_w);
    dst.restart_interval = static_cast<unsigned>(restart_interval_for(mcus_per_row));
    dst.optimize_coding = TRUE;  // tables fitted to the image: smaller than the defaults
    jpeg_mem_dest(&dst, &buffer, &size);
    jpeg_write_coefficients(&dst, coefficients);
    for (jpeg_saved_marker_ptr m = src.marker_list; m != nullptr; m = m->next) {
      // libjpeg writes its own JFIF and Adobe markers when the parameters call for them.
      if (dst.write_JFIF_header && m->marker == JPEG_APP0 && m->data_length >= 5 &&
          std::memcmp(m->data, "JFIF", 5) == 0)
        continue;
      if (dst.write_Adobe_marker && m->marker == JPEG_APP0 + 14 && m->data_length >= 5 &&
          std::memcmp(m->data, "Adobe", 5) == 0)
        continue;
      jpeg_write_marker(&dst, m->marker, m->data, m->data_length);
    }
    jpeg_finish_compress(&dst);
    jpeg_finish_decompress(&src);
    return true;
  }
};

}  // namespace

std::string add_restart_markers(std::span<const uint8_t> jpeg, std::vector<uint8_t>& out) {
  out.clear();
  if (jpeg.size() < 4 || jpeg[0] != 0xFF || jpeg[1] != 0xD8) return "not a JPEG";
  auto t = std::make_unique<Transcoder>();
  if (!t->run(jpeg.data(), jpeg.size())) return t->failure.message;
  out.assign(t->buffer, t->buffer + t->size);
  return {};
}

bool RestartTiles::parse(std::span<const uint8_t> j) {
  begin_.clear();
  end_.clear();
  width_ = height_ = columns_ = rows_ = 0;
  scan_begin_ = 0;
  if (j.size() < 4 || j[0] != 0xFF || j[1] != 0xD8) return false;
  int components = 0, h_max = 1, v_max = 1, interval = 0;
  bool have_frame = false;
  size_t i = 2;
  while (i + 4 <= j.size()) {
    if (j[i] != 0xFF) return false;
    const uint8_t marker = j[i + 1];
    if (marker == 0xFF) {  // fill byte
      ++i;
      continue;
    }
    const size_t length = (size_t{j[i + 2]} << 8) | j[i + 3];
    if (length < 2 || i + 2 + length > j.size()) return false;
    const uint8_t* s = j.data() + i + 4;     // the segment's payload, length - 2 bytes
    if (marker == 0xC0 || marker == 0xC1) {  // baseline / extended sequential, Huffman
      if (length < 8 || s[0] != 8) return false;
      height_ = (s[1] << 8) | s[2];
      width_ = (s[3] << 8) | s[4];
      components = s[5];
      if (components < 1 || length < 8 + 3 * size_t(components)) return false;
      for (int c = 0; c < components; ++c) {
        h_max = std::max(h_max, s[6 + 3 * c + 1] >> 4);
        v_max = std::max(v_max, s[6 + 3 * c + 1] & 15);
      }
      sof_size_at_ = i + 5;
      have_frame = true;
    } else if (marker >= 0xC2 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 &&
               marker != 0xCC) {
      return false;  // progressive, lossless or arithmetic-coded frames
    } else if (marker == 0xDD) {
      if (length < 4) return false;
      interval = (s[0] << 8) | s[1];
    } else if (marker == 0xDA) {
      if (!have_frame || length < 3 || s[0] != components) return false;  // one scan, all
      scan_begin_ = i + 2 + length;
      break;
    }
    i += 2 + length;
  }
  if (scan_begin_ == 0 || interval <= 0 || width_ <= 0 || height_ <= 0) return false;
  mcu_w_ = components == 1 ? 8 : 8 * h_max;
  mcu_h_ = components == 1 ? 8 : 8 * v_max;
  const int mcus_per_row = (width_ + mcu_w_ - 1) / mcu_w_;
  if (mcus_per_row % interval != 0) return false;
  interval_ = interval;
  columns_ = mcus_per_row / interval;
  rows_ = (height_ + mcu_h_ - 1) / mcu_h_;
  return true;
}

bool RestartTiles::locate(std::span<const uint8_t> j, int last) {
  const size_t total = static_cast<size_t>(columns_) * rows_;
  size_t p = begin_.empty() ? scan_begin_ : end_.back() + 2;
  while (static_cast<int>(begin_.size()) <= last) {
    const size_t start = p;
    for (;;) {
      if (p >= j.size()) return false;
      const void* hit = std::memchr(j.data() + p, 0xFF, j.size() - p);
      if (hit == nullptr) return false;
      const size_t q = static_cast<const uint8_t*>(hit) - j.data();
      if (q + 1 >= j.size()) return false;
      const uint8_t next = j[q + 1];
      if (next == 0x00 || next == 0xFF) {  // a stuffed 0xFF data byte, or fill before a marker
        p = q + 1 + (next == 0x00);
        continue;
      }
      const size_t n = begin_.size();
      const bool is_restart = next >= 0xD0 && next <= 0xD7;
      if (is_restart && n + 1 < total && next - 0xD0 == static_cast<int>(n % 8)) {
        begin_.push_back(static_cast<uint32_t>(start));
        end_.push_back(static_cast<uint32_t>(q));
        p = q + 2;
        break;
      }
      if (next == 0xD9 && n + 1 == total) {  // end of image closes the last interval
        begin_.push_back(static_cast<uint32_t>(start));
        end_.push_back(static_cast<uint32_t>(q));
        break;
      }
      return false;  // a marker out of sequence, early end, DNL, another scan
    }
  }
  return true;
}

bool RestartTiles::slice(std::span<const uint8_t> j, int col0, int col1, int row0, int row1,
                         std::vector<uint8_t>& out) {
  if (!(0 <= col0 && col0 <= col1 && col1 < columns_ && 0 <= row0 && row0 <= row1 &&
        row1 < rows_)) {
    return false;
  }
  if (!locate(j, row1 * columns_ + col1)) return false;
  const int tw = tile_width();
  const int new_w = std::min(width_, (col1 + 1) * tw) - col0 * tw;
  const int new_h = std::min(height_, (row1 + 1) * mcu_h_) - row0 * mcu_h_;
  size_t bytes = scan_begin_ + 2;
  for (int r = row0; r <= row1; ++r) {
    const size_t a = static_cast<size_t>(r) * columns_;
    bytes += end_[a + col1] - begin_[a + col0] + 2 * static_cast<size_t>(col1 - col0 + 1);
  }
  out.resize(bytes);
  uint8_t* o = out.data();
  std::memcpy(o, j.data(), scan_begin_);
  o[sof_size_at_] = static_cast<uint8_t>(new_h >> 8);
  o[sof_size_at_ + 1] = static_cast<uint8_t>(new_h & 0xFF);
  o[sof_size_at_ + 2] = static_cast<uint8_t>(new_w >> 8);
  o[sof_size_at_ + 3] = static_cast<uint8_t>(new_w & 0xFF);
  o += scan_begin_;
  int n = 0;
  for (int r = row0; r <= row1; ++r) {
    for (int c = col0; c <= col1; ++c, ++n) {
      if (n > 0) {  // restart markers count 0..7 from the slice's first interval
        *o++ = 0xFF;
        *o++ = static_cast<uint8_t>(0xD0 + ((n - 1) & 7));
      }
      const size_t t = static_cast<size_t>(r) * columns_ + c;
      std::memcpy(o, j.data() + begin_[t], end_[t] - begin_[t]);
      o += end_[t] - begin_[t];
    }
  }
  *o++ = 0xFF;
  *o++ = 0xD9;
  out.resize(static_cast<size_t>(o - out.data()));
  return true;
}

}  // namespace stoker::data::detail
