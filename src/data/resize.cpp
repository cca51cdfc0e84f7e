// Separable area/bilinear resize. The weights of each output pixel are computed once per call
// per axis (they depend only on the geometry) and padded to a fixed tap count, so the pixel
// loops are fixed-length weighted sums. Vertical first: it is the contiguous pass (u8 rows ->
// floats, vectorized by the compiler) and it leaves only out_h rows for the horizontal pass,
// which does one 4-float multiply-add per tap (RGB + one unused lane) and rounds all lanes
// with one conversion.
//
// Edge rule: taps are clamped to the pixels the region touches ([floor(begin),
// ceil(begin+length)) within the image), which is what "crop, then resize the crop" does; it
// also means the decoder never needs pixels outside the crop.
#include "stoker/data/resize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define STOKER_RESIZE_AVX2 1
#endif

#include "stoker/core/error.h"

namespace stoker::data {

void AxisWeights::compute(double begin, double length, int source_len, int out_len) {
  STOKER_CHECK(out_len > 0 && source_len > 0 && length > 0.0, "resize: empty axis (source ",
               source_len, ", region length ", length, ", output ", out_len, ")");
  STOKER_CHECK(begin >= -1e-6 && begin + length <= source_len + 1e-6, "resize: region [", begin,
               ", ", begin + length, ") lies outside the source axis of ", source_len, " pixels");
  const int lo = std::clamp(static_cast<int>(std::floor(begin + 1e-9)), 0, source_len - 1);
  const int hi =
      std::clamp(static_cast<int>(std::ceil(begin + length - 1e-9)) - 1, lo, source_len - 1);
  start.resize(out_len);
  count.resize(out_len);
  offset.resize(out_len);
  weights.clear();
  const double scale = length / out_len;
  for (int i = 0; i < out_len; ++i) {
    offset[i] = static_cast<int>(weights.size());
    if (scale > 1.0) {
      // Area: overlap of each source pixel with [a, b), normalized.
      const double a = begin + i * scale;
      const double b = a + scale;
      int first = std::clamp(static_cast<int>(std::floor(a)), lo, hi);
      int last = std::clamp(static_cast<int>(std::ceil(b)) - 1, first, hi);
      // Drop slivers below float noise so the tap range stays tight.
      while (last > first && std::min(b, last + 1.0) - std::max(a, double(last)) < 1e-9) --last;
      while (first < last && std::min(b, first + 1.0) - std::max(a, double(first)) < 1e-9) ++first;
      double sum = 0.0;
      for (int p = first; p <= last; ++p)
        sum += std::max(0.0, std::min(b, p + 1.0) - std::max(a, double(p)));
      for (int p = first; p <= last; ++p) {
        const double w = std::max(0.0, std::min(b, p + 1.0) - std::max(a, double(p)));
        weights.push_back(static_cast<float>(sum > 0.0 ? w / sum : 1.0 / (last - first + 1)));
      }
      start[i] = first;
      count[i] = last - first + 1;
    } else {
      // Bilinear at pixel centres.
      const double c = begin + (i + 0.5) * scale - 0.5;
      const int i0 = static_cast<int>(std::floor(c));
      const double f = c - i0;
      const int a0 = std::clamp(i0, lo, hi);
      const int a1 = std::clamp(i0 + 1, lo, hi);
      start[i] = a0;
      if (a0 == a1 || f < 1e-9) {
        count[i] = 1;
        weights.push_back(1.0f);
      } else {
        count[i] = 2;
        weights.push_back(static_cast<float>(1.0 - f));
        weights.push_back(static_cast<float>(f));
      }
    }
  }
  min_index = start[0];
  max_index = start[0] + count[0] - 1;
  taps = 0;
  for (int i = 0; i < out_len; ++i) {
    min_index = std::min(min_index, start[i]);
    max_index = std::max(max_index, start[i] + count[i] - 1);
    taps = std::max(taps, count[i]);
  }
  // Fixed-length taps: shift the window left where it would run past max_index (the span
  // [min_index, max_index] is at least `taps` long, so it always fits).
  padded_start.resize(out_len);
  padded_weights.assign(static_cast<size_t>(out_len) * taps, 0.0f);
  for (int i = 0; i < out_len; ++i) {
    const int ps = std::min(start[i], max_index - taps + 1);
    padded_start[i] = ps;
    for (int k = 0; k < count[i]; ++k) {
      padded_weights[static_cast<size_t>(i) * taps + (start[i] - ps) + k] = weights[offset[i] + k];
    }
  }
}

namespace {

// Four floats (R, G, B and the next pixel's R, unused) as one SIMD register: each tap is one
// multiply-add. GCC/Clang vector extension, so it maps to SSE on x86-64 and NEON on AArch64.
typedef float Float4 __attribute__((vector_size(16)));
typedef int Int4 __attribute__((vector_size(16)));

// One vertically resampled row of floats (source columns from the window's first needed one,
// plus one float of padding) -> out_w RGB u8 through fixed-length taps (K known at compile
// time; 0 = runtime `taps`), written mirrored when `flip`.
template <int K>
void horizontal_row(const float* in, uint8_t* out, const int* start, const float* w, int out_w,
                    int first_col, int taps, bool flip) {
  const int k_count = K > 0 ? K : taps;
  for (int i = 0; i < out_w; ++i, w += k_count) {
    const float* p = in + static_cast<size_t>(start[i] - first_col) * 3;
    Float4 acc = {0.f, 0.f, 0.f, 0.f};
    for (int k = 0; k < k_count; ++k) {
      Float4 v;
      std::memcpy(&v, p + 3 * k, sizeof v);
      acc += w[k] * v;
    }
    // Round all lanes in one conversion: +0.5 and truncate. No clamp: weights are non-negative
    // and sum to 1 (to float rounding), so a value is a convex combination of u8 inputs, within
    // [-1e-4, 255 + 1e-4] (and a clamp's compares cost a third of this loop).
    const Int4 q = __builtin_convertvector(acc + 0.5f, Int4);
    uint8_t* o = out + static_cast<size_t>(flip ? out_w - 1 - i : i) * 3;
    o[0] = static_cast<uint8_t>(q[0]);
    o[1] = static_cast<uint8_t>(q[1]);
    o[2] = static_cast<uint8_t>(q[2]);
  }
}

// x86-64: also compile the vertical pass for AVX2 (8 floats per instruction), picked at load
// time by the CPU; no FMA in either clone, so both round identically. Not under gcc's
// ThreadSanitizer: the clones' ifunc resolver is instrumented too and runs during relocation,
// before the TSan runtime is up, and crashes every program at startup.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define STOKER_RESIZE_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define STOKER_RESIZE_CLONES
#endif

// acc[n] = sum_k w[k] * rows[k][n] over `count` source rows `stride` bytes apart.
STOKER_RESIZE_CLONES
void vertical_row(const uint8_t* row, size_t stride, const float* w, int count, float* acc,
                  int col_len) {
  const float w0 = w[0];
  for (int n = 0; n < col_len; ++n) acc[n] = w0 * static_cast<float>(row[n]);
  for (int k = 1; k < count; ++k) {
    row += stride;
    const float wk = w[k];
    for (int n = 0; n < col_len; ++n) acc[n] += wk * static_cast<float>(row[n]);
  }
}

#if STOKER_RESIZE_AVX2
// The horizontal pass two output pixels at a time in 8 AVX2 lanes (pixel i's RGB+pad in the
// low half, pixel i+1's in the high half), weights pre-expanded per pair (Resizer::prepare):
// the same multiplies and adds in the same order as horizontal_row (no FMA), so the bytes are
// identical. 6 bytes stored per pair (through a small buffer, so nothing past the row is
// touched); an odd last pixel goes through the scalar loop.
template <int K>
__attribute__((target("avx2"))) void horizontal_row_avx2(const float* in, uint8_t* out,
                                                         const int* start, const float* pair_w,
                                                         const float* w, int out_w, int first_col,
                                                         int taps, bool flip) {
  const int k_count = K > 0 ? K : taps;
  const int pairs = out_w / 2;
  // Bytes 0-2 = pixel i, 4-6 = pixel i+1 after the two packs; reorder into RGBRGB.
  const __m128i keep = _mm_setr_epi8(0, 1, 2, 4, 5, 6, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m128i swap = _mm_setr_epi8(4, 5, 6, 0, 1, 2, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256 half = _mm256_set1_ps(0.5f);
  for (int j = 0; j < pairs; ++j) {  // pair j = output pixels 2j, 2j+1
    const int i = 2 * j;
    const float* p0 = in + static_cast<size_t>(start[i] - first_col) * 3;
    const float* p1 = in + static_cast<size_t>(start[i + 1] - first_col) * 3;
    const float* pw = pair_w + static_cast<size_t>(j) * k_count * 8;
    __m256 acc = _mm256_setzero_ps();
    for (int k = 0; k < k_count; ++k) {
      const __m256 v = _mm256_set_m128(_mm_loadu_ps(p1 + 3 * k), _mm_loadu_ps(p0 + 3 * k));
      acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(pw + 8 * k), v));
    }
    const __m256i q = _mm256_cvttps_epi32(_mm256_add_ps(acc, half));
    const __m128i q16 = _mm_packus_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    const __m128i q8 = _mm_shuffle_epi8(_mm_packus_epi16(q16, q16), flip ? swap : keep);
    uint8_t bytes[16];
    _mm_storeu_si128(reinterpret_cast<__m128i*>(bytes), q8);
    std::memcpy(out + static_cast<size_t>(flip ? out_w - 2 - i : i) * 3, bytes, 6);
  }
  if (out_w % 2 != 0) {  // the last pixel, written at column 0 when flipped
    const int i = out_w - 1;
    horizontal_row<K>(in, out + static_cast<size_t>(flip ? 0 : i) * 3, start + i,
                      w + static_cast<size_t>(i) * k_count, 1, first_col, taps, false);
  }
}
#endif

using HorizontalFn = void (*)(const float*, uint8_t*, const int*, const float*, int, int, int,
                              bool);

HorizontalFn horizontal_for(int taps) {
  switch (taps) {
    case 1:
      return horizontal_row<1>;
    case 2:
      return horizontal_row<2>;
    case 3:
      return horizontal_row<3>;
    case 4:
      return horizontal_row<4>;
    case 5:
      return horizontal_row<5>;
    case 6:
      return horizontal_row<6>;
    default:
      return horizontal_row<0>;
  }
}

#if STOKER_RESIZE_AVX2
using HorizontalAvx2Fn = void (*)(const float*, uint8_t*, const int*, const float*, const float*,
                                  int, int, int, bool);

HorizontalAvx2Fn horizontal_avx2_for(int taps) {
  switch (taps) {
    case 1:
      return horizontal_row_avx2<1>;
    case 2:
      return horizontal_row_avx2<2>;
    case 3:
      return horizontal_row_avx2<3>;
    case 4:
      return horizontal_row_avx2<4>;
    case 5:
      return horizontal_row_avx2<5>;
    case 6:
      return horizontal_row_avx2<6>;
    default:
      return horizontal_row_avx2<0>;
  }
}

bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#endif

}  // namespace

bool Resizer::simd_available() {
#if STOKER_RESIZE_AVX2
  return cpu_has_avx2();
#else
  return false;
#endif
}

void Resizer::prepare(int image_width, int image_height, double x, double y, double w, double h,
                      int out_w, int out_h) {
  wx_.compute(x, w, image_width, out_w);
  wy_.compute(y, h, image_height, out_h);
}

void Resizer::resize(const RgbView& src, int image_width, int image_height, double x, double y,
                     double w, double h, int out_w, int out_h, uint8_t* dst, bool flip) {
  prepare(image_width, image_height, x, y, w, h, out_w, out_h);
  resize_prepared(src, dst, flip);
}

void Resizer::resize_prepared(const RgbView& src, uint8_t* dst, bool flip) {
  const int out_w = static_cast<int>(wx_.start.size());
  const int out_h = static_cast<int>(wy_.start.size());
  STOKER_CHECK(wx_.min_index >= src.x_origin && wx_.max_index < src.x_origin + src.width &&
                   wy_.min_index >= src.y_origin && wy_.max_index < src.y_origin + src.height,
               "resize: source window columns [", src.x_origin, ", ", src.x_origin + src.width,
               ") rows [", src.y_origin, ", ", src.y_origin + src.height,
               ") does not hold the pixels the region needs (columns ", wx_.min_index, "..",
               wx_.max_index, ", rows ", wy_.min_index, "..", wy_.max_index, ")");
  // Vertical first: each output row is a weighted sum of whole source rows (contiguous u8 ->
  // float, vectorized) over the needed columns only; then the horizontal taps on those floats.
  const int first_col = wx_.min_index;
  const int col_len = (wx_.max_index - wx_.min_index + 1) * 3;
  rows_.resize(static_cast<size_t>(col_len) + 4);
  float* acc = rows_.data();
  acc[col_len] = 0.0f;  // the 4th lane of the last pixel's load
  const size_t col_offset = static_cast<size_t>(first_col - src.x_origin) * 3;
#if STOKER_RESIZE_AVX2
  const bool simd = simd_ && cpu_has_avx2();
  const HorizontalAvx2Fn horizontal_avx2 = simd ? horizontal_avx2_for(wx_.taps) : nullptr;
  if (simd) {
    // Each pair's weights as 8 lanes per tap: w(i, k) x4 then w(i+1, k) x4.
    const int taps = wx_.taps;
    const int pairs = out_w / 2;
    pair_weights_.resize(static_cast<size_t>(pairs) * taps * 8);
    for (int j = 0; j < pairs; ++j) {
      for (int k = 0; k < taps; ++k) {
        float* lanes = pair_weights_.data() + (static_cast<size_t>(j) * taps + k) * 8;
        const float w0 = wx_.padded_weights[static_cast<size_t>(2 * j) * taps + k];
        const float w1 = wx_.padded_weights[static_cast<size_t>(2 * j + 1) * taps + k];
        for (int l = 0; l < 4; ++l) lanes[l] = w0, lanes[4 + l] = w1;
      }
    }
  }
#endif
  const HorizontalFn horizontal = horizontal_for(wx_.taps);
  for (int j = 0; j < out_h; ++j) {
    const float* wt = wy_.weights.data() + wy_.offset[j];
    const uint8_t* row =
        src.data + static_cast<size_t>(wy_.start[j] - src.y_origin) * src.stride + col_offset;
    vertical_row(row, src.stride, wt, wy_.count[j], acc, col_len);
    uint8_t* out = dst + static_cast<size_t>(j) * out_w * 3;
#if STOKER_RESIZE_AVX2
    if (simd) {
      horizontal_avx2(acc, out, wx_.padded_start.data(), pair_weights_.data(),
                      wx_.padded_weights.data(), out_w, first_col, wx_.taps, flip);
      continue;
    }
#endif
    horizontal(acc, out, wx_.padded_start.data(), wx_.padded_weights.data(), out_w, first_col,
               wx_.taps, flip);
  }
}

void resize_rgb(const RgbView& src, double x, double y, double w, double h, int out_w, int out_h,
                uint8_t* dst, bool flip) {
  Resizer resizer;
  RgbView view = src;
  view.x_origin = 0;
  view.y_origin = 0;
  resizer.resize(view, src.width, src.height, x, y, w, h, out_w, out_h, dst, flip);
}

}  // namespace stoker::data
