// Separable area/bilinear resize in fixed point (what OpenCV and Pillow do for u8 images: 16-bit
// multiply-adds do twice the work per instruction of float ones, and the results are exact
// integers, so the AVX2 passes and the portable loops write the same bytes). The weights of each
// output pixel are computed once per call per axis (they depend only on the geometry), rounded
// to 14 bits and padded to a fixed tap count. Vertical first: it is the contiguous pass (u8 rows
// -> 16-bit values with 7 fraction bits) and it leaves only out_h rows for the horizontal pass.
//
// Edge rule: taps are clamped to the pixels the region touches ([floor(begin),
// ceil(begin+length)) within the image), which is what "crop, then resize the crop" does; it
// also means the decoder never needs pixels outside the crop.
#include "data/resize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define STOKER_RESIZE_AVX2 1
#endif

#include "stoker/core/error.h"

namespace stoker::data {

namespace {
constexpr int kWeightBits = 14;  // weights are fractions of 1 << 14 (sum exact, max 16384)
constexpr int kOne = 1 << kWeightBits;
constexpr int kRowBits = 7;  // the vertical pass keeps 7 fraction bits: 255 * 128 < 2^15
}  // namespace

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
  fixed.assign(static_cast<size_t>(out_len) * taps, 0);
  for (int i = 0; i < out_len; ++i) {
    const int ps = std::min(start[i], max_index - taps + 1);
    padded_start[i] = ps;
    // Round each weight to 14 bits, then give the rounding's remainder to the largest one: the
    // sum is exactly 1 << 14, so a constant region stays that constant.
    int16_t* q = fixed.data() + static_cast<size_t>(i) * taps + (start[i] - ps);
    int sum = 0, largest = 0;
    for (int k = 0; k < count[i]; ++k) {
      q[k] = static_cast<int16_t>(weights[offset[i] + k] * float{kOne} + 0.5f);  // w >= 0
      sum += q[k];
      if (q[k] > q[largest]) largest = k;
    }
    q[largest] = static_cast<int16_t>(q[largest] + (kOne - sum));
  }
}

namespace {

// Vertical pass: row_out[n] = round(sum_k w[k] * rows[k][n] / 2^(kWeightBits - kRowBits)),
// the u8 value times 128 in 16 bits (255 * 128 < 2^15).
constexpr int kRowShift = kWeightBits - kRowBits;
constexpr int32_t kRowRound = 1 << (kRowShift - 1);
// Horizontal pass: 14-bit weights times 7-bit-fraction rows = 21 fraction bits.
constexpr int kOutShift = kWeightBits + kRowBits;
constexpr int32_t kOutRound = 1 << (kOutShift - 1);

// `count` source rows `stride` bytes apart, `col_len` bytes each -> row_out. The portable loop
// sums whole rows (vectorizable) into 32-bit `wide`.
void vertical_row(const uint8_t* row, size_t stride, const int16_t* w, int count, int32_t* wide,
                  int16_t* row_out, int col_len) {
  for (int n = 0; n < col_len; ++n) wide[n] = kRowRound + w[0] * int32_t{row[n]};
  for (int k = 1; k < count; ++k) {
    row += stride;
    const int32_t wk = w[k];
    for (int n = 0; n < col_len; ++n) wide[n] += wk * int32_t{row[n]};
  }
  for (int n = 0; n < col_len; ++n) row_out[n] = static_cast<int16_t>(wide[n] >> kRowShift);
}

// One vertically resampled row (source columns from the window's first needed one) -> out_w
// RGB u8 through fixed-length taps (K known at compile time; 0 = runtime `taps`), written
// mirrored when `flip`. No clamp: weights are non-negative and sum to exactly 1, so a result is
// a convex combination of values in [0, 255].
template <int K>
void horizontal_row(const int16_t* in, uint8_t* out, const int* start, const int16_t* w, int out_w,
                    int first_col, int taps, bool flip) {
  const int k_count = K > 0 ? K : taps;
  for (int i = 0; i < out_w; ++i, w += k_count) {
    const int16_t* p = in + static_cast<size_t>(start[i] - first_col) * 3;
    int32_t r = kOutRound, g = kOutRound, b = kOutRound;
    for (int k = 0; k < k_count; ++k) {
      r += w[k] * int32_t{p[3 * k]};
      g += w[k] * int32_t{p[3 * k + 1]};
      b += w[k] * int32_t{p[3 * k + 2]};
    }
    uint8_t* o = out + static_cast<size_t>(flip ? out_w - 1 - i : i) * 3;
    o[0] = static_cast<uint8_t>(r >> kOutShift);
    o[1] = static_cast<uint8_t>(g >> kOutShift);
    o[2] = static_cast<uint8_t>(b >> kOutShift);
  }
}

#if STOKER_RESIZE_AVX2
// The vertical passes' weights for rows 2p and 2p + 1 as one 32-bit word (low half: the even
// row's), broadcast per use; an odd last row pairs with weight 0.
void weight_pairs(const int16_t* w, int count, int32_t* pairs) {
  for (int p = 0; p < (count + 1) / 2; ++p) {
    const int k = 2 * p;
    const uint16_t lo = static_cast<uint16_t>(w[k]);
    const uint16_t hi = k + 1 < count ? static_cast<uint16_t>(w[k + 1]) : 0;
    pairs[p] = static_cast<int32_t>(lo | (uint32_t{hi} << 16));
  }
}

// The horizontal passes' output: 4 pixels given as R, G, B, 0 bytes, stored as 12 bytes in
// output order (mirrored when `flip`), as 8 + 4 straight from the register (a 16-byte store
// would run past the row; bouncing through a stack buffer costs a store-forwarding stall).
__attribute__((target("avx2"), always_inline)) inline void store_four_pixels(__m128i px, uint8_t* o,
                                                                             bool flip) {
  const __m128i keep = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
  const __m128i reverse = _mm_setr_epi8(12, 13, 14, 8, 9, 10, 4, 5, 6, 0, 1, 2, -1, -1, -1, -1);
  const __m128i rgb = _mm_shuffle_epi8(px, flip ? reverse : keep);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(o), rgb);
  const int32_t tail = _mm_extract_epi32(rgb, 2);
  std::memcpy(o + 8, &tail, 4);
}

// The last out_w % 4 pixels of a SIMD row through the portable loop (at the left end when
// flipped).
void horizontal_rest(const int16_t* in, uint8_t* out, const int* start, const int16_t* w, int out_w,
                     int first_col, int taps, bool flip) {
  const int done = out_w / 4 * 4;
  if (done == out_w) return;
  horizontal_row<0>(in, out + static_cast<size_t>(flip ? 0 : done) * 3, start + done,
                    w + static_cast<size_t>(done) * taps, out_w - done, first_col, taps, flip);
}

// The vertical pass 16 columns at a time: two source rows' u8 widened to 16 bits and
// interleaved, one multiply-add of each pair with its two weights into 32-bit sums (an odd last
// row pairs with itself at weight 0). Integer arithmetic: the same values as the portable loop.
__attribute__((target("avx2"))) void vertical_row_avx2(const uint8_t* row, size_t stride,
                                                       const int16_t* w, int count,
                                                       int16_t* row_out, int col_len) {
  // Weight pairs as 32-bit words (low half: the even row's weight), broadcast per use.
  int32_t pairs[32];
  const int pair_count = (count + 1) / 2;
  if (pair_count > 32) {  // a huge shrink: the portable loop (rare, slow anyway)
    std::vector<int32_t> wide(static_cast<size_t>(col_len));
    vertical_row(row, stride, w, count, wide.data(), row_out, col_len);
    return;
  }
  weight_pairs(w, count, pairs);
  const __m256i round = _mm256_set1_epi32(kRowRound);
  int n = 0;
  for (; n + 16 <= col_len; n += 16) {
    __m256i lo = round, hi = round;
    const uint8_t* r = row + n;
    for (int p = 0; p < pair_count; ++p, r += 2 * stride) {
      const __m256i a = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r)));
      const uint8_t* r1 = 2 * p + 1 < count ? r + stride : r;
      const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r1)));
      const __m256i wp = _mm256_set1_epi32(pairs[p]);
      // Per 128-bit lane: columns 0-3 (lo) and 4-7 (hi) of the lane's 8; the pack below
      // restores column order.
      lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, b), wp));
      hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, b), wp));
    }
    const __m256i packed =
        _mm256_packs_epi32(_mm256_srai_epi32(lo, kRowShift), _mm256_srai_epi32(hi, kRowShift));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(row_out + n), packed);
  }
  for (; n < col_len; ++n) {  // the last < 16 columns, same arithmetic
    int32_t acc = kRowRound;
    for (int k = 0; k < count; ++k) acc += w[k] * int32_t{row[k * stride + n]};
    row_out[n] = static_cast<int16_t>(acc >> kRowShift);
  }
}

// Sums of output pixels i (low lane) and i + 1 (high lane), shifted to u8 range; see below.
template <int P>
__attribute__((target("avx2"), always_inline)) inline __m256i pair_sum_avx2(
    const int16_t* in, const int* start, const int16_t* pair_w, int i, int first_col, int p_count) {
  const __m256i interleave = _mm256_setr_epi8(0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11, -1, -1, -1, -1,
                                              0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11, -1, -1, -1, -1);
  const int16_t* p0 = in + static_cast<size_t>(start[i] - first_col) * 3;
  const int16_t* p1 = in + static_cast<size_t>(start[i + 1] - first_col) * 3;
  const int16_t* pw = pair_w + static_cast<size_t>(i / 2) * p_count * 16;
  __m256i acc = _mm256_set1_epi32(kOutRound);
  for (int p = 0; p < (P > 0 ? P : p_count); ++p) {
    const __m256i v = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(p1 + 6 * p),
                                          reinterpret_cast<const __m128i*>(p0 + 6 * p));
    const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pw + 16 * p));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_shuffle_epi8(v, interleave), wv));
  }
  return _mm256_srai_epi32(acc, kOutShift);
}

// The horizontal pass for a pair of output pixels (one per 128-bit lane) and a pair of taps at
// a time: 8 16-bit values loaded at the tap (its RGB and the next pixel's), shuffled into
// (R R G G B B 0 0) and multiplied-added with (w w) pairs into R, G, B, 0 sums. Four pixels are
// rounded, packed and stored (12 bytes) together; the last out_w % 4 go through the portable
// loop. Integer arithmetic: the same bytes as horizontal_row.
template <int P>  // tap pairs (0 = runtime)
__attribute__((target("avx2"))) void horizontal_row_avx2(const int16_t* in, uint8_t* out,
                                                         const int* start, const int16_t* pair_w,
                                                         const int16_t* w, int out_w, int first_col,
                                                         int taps, bool flip) {
  const int p_count = P > 0 ? P : (taps + 1) / 2;
  for (int i = 0; i + 4 <= out_w; i += 4) {
    const __m256i a = pair_sum_avx2<P>(in, start, pair_w, i, first_col, p_count);  // i, i + 1
    const __m256i b = pair_sum_avx2<P>(in, start, pair_w, i + 2, first_col, p_count);
    // 16-bit: lane 0 = (i, i + 2), lane 1 = (i + 1, i + 3); then bytes, then pixel order.
    const __m256i s16 = _mm256_packs_epi32(a, b);
    const __m256i s8 = _mm256_packus_epi16(s16, s16);
    const __m128i px = _mm_unpacklo_epi32(_mm256_castsi256_si128(s8),
                                          _mm256_extracti128_si256(s8, 1));  // i .. i + 3, RGB0
    store_four_pixels(px, out + static_cast<size_t>(flip ? out_w - 4 - i : i) * 3, flip);
  }
  horizontal_rest(in, out, start, w, out_w, first_col, taps, flip);
}

// AVX-512 (BW): the same passes at twice the width — 32 columns per vertical step, four output
// pixels (one per 128-bit lane) per horizontal step. Integer arithmetic: the same bytes.
#define STOKER_AVX512 __attribute__((target("avx512bw,avx512f")))
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_epi32 and warn about it (GCC bug
// 105593, fixed in 13); nothing here reads an undefined value.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

STOKER_AVX512 void vertical_row_avx512(const uint8_t* row, size_t stride, const int16_t* w,
                                       int count, int16_t* row_out, int col_len) {
  int32_t pairs[32];
  const int pair_count = (count + 1) / 2;
  if (pair_count > 32 || col_len < 32) {
    vertical_row_avx2(row, stride, w, count, row_out, col_len);
    return;
  }
  weight_pairs(w, count, pairs);
  const __m512i round = _mm512_set1_epi32(kRowRound);
  int n = 0;
  for (; n + 32 <= col_len; n += 32) {
    __m512i lo = round, hi = round;
    const uint8_t* r = row + n;
    for (int p = 0; p < pair_count; ++p, r += 2 * stride) {
      const __m512i a =
          _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r)));
      const uint8_t* r1 = 2 * p + 1 < count ? r + stride : r;
      const __m512i b =
          _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r1)));
      const __m512i wp = _mm512_set1_epi32(pairs[p]);
      lo = _mm512_add_epi32(lo, _mm512_madd_epi16(_mm512_unpacklo_epi16(a, b), wp));
      hi = _mm512_add_epi32(hi, _mm512_madd_epi16(_mm512_unpackhi_epi16(a, b), wp));
    }
    const __m512i packed =
        _mm512_packs_epi32(_mm512_srai_epi32(lo, kRowShift), _mm512_srai_epi32(hi, kRowShift));
    _mm512_storeu_si512(row_out + n, packed);
  }
  if (n < col_len) vertical_row_avx2(row + n, stride, w, count, row_out + n, col_len - n);
}

template <int P>  // tap pairs (0 = runtime)
STOKER_AVX512 void horizontal_row_avx512(const int16_t* in, uint8_t* out, const int* start,
                                         const int16_t* quad_w, const int16_t* w, int out_w,
                                         int first_col, int taps, bool flip) {
  const int p_count = P > 0 ? P : (taps + 1) / 2;
  const __m512i interleave =
      _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11, -1, -1, -1, -1));
  // Dword 0 of each lane (pixel k's R, G, B, 0 bytes after the packs) to dwords 0..3.
  const __m512i first_dwords = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i round = _mm512_set1_epi32(kOutRound);
  for (int i = 0; i + 4 <= out_w; i += 4) {
    const int j = i / 4;
    const int16_t* p0 = in + static_cast<size_t>(start[i] - first_col) * 3;
    const int16_t* p1 = in + static_cast<size_t>(start[i + 1] - first_col) * 3;
    const int16_t* p2 = in + static_cast<size_t>(start[i + 2] - first_col) * 3;
    const int16_t* p3 = in + static_cast<size_t>(start[i + 3] - first_col) * 3;
    const int16_t* pw = quad_w + static_cast<size_t>(j) * p_count * 32;
    __m512i acc = round;
    for (int p = 0; p < p_count; ++p) {
      __m512i v =
          _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p0 + 6 * p)));
      v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p1 + 6 * p)), 1);
      v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p2 + 6 * p)), 2);
      v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p3 + 6 * p)), 3);
      acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_shuffle_epi8(v, interleave),
                                                    _mm512_loadu_si512(pw + 32 * p)));
    }
    const __m512i sums = _mm512_srai_epi32(acc, kOutShift);
    const __m512i s16 = _mm512_packs_epi32(sums, sums);
    const __m512i s8 = _mm512_packus_epi16(s16, s16);
    const __m128i px = _mm512_castsi512_si128(_mm512_permutexvar_epi32(first_dwords, s8));
    store_four_pixels(px, out + static_cast<size_t>(flip ? out_w - 4 - i : i) * 3, flip);
  }
  horizontal_rest(in, out, start, w, out_w, first_col, taps, flip);
}
#endif

using HorizontalFn = void (*)(const int16_t*, uint8_t*, const int*, const int16_t*, int, int, int,
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
using HorizontalAvx2Fn = void (*)(const int16_t*, uint8_t*, const int*, const int16_t*,
                                  const int16_t*, int, int, int, bool);

HorizontalAvx2Fn horizontal_avx2_for(int taps) {
  switch ((taps + 1) / 2) {
    case 1:
      return horizontal_row_avx2<1>;
    case 2:
      return horizontal_row_avx2<2>;
    case 3:
      return horizontal_row_avx2<3>;
    default:
      return horizontal_row_avx2<0>;
  }
}

HorizontalAvx2Fn horizontal_avx512_for(int taps) {
  switch ((taps + 1) / 2) {
    case 1:
      return horizontal_row_avx512<1>;
    case 2:
      return horizontal_row_avx512<2>;
    case 3:
      return horizontal_row_avx512<3>;
    default:
      return horizontal_row_avx512<0>;
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}

bool cpu_has_avx512() {
  static const bool has = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512f");
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

bool Resizer::avx512_available() {
#if STOKER_RESIZE_AVX2
  return cpu_has_avx512();
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
  // Vertical first: each output row is a weighted sum of whole source rows (contiguous u8,
  // vectorized) over the needed columns only; then the horizontal taps on that row.
  const int first_col = wx_.min_index;
  const int col_len = (wx_.max_index - wx_.min_index + 1) * 3;
  // Zero padding after the row: the AVX2 pass loads 8 values at a tap pair's first pixel (its
  // zero-weighted tail reaches up to 5 values past the row).
  row_.assign(static_cast<size_t>(col_len) + 8, 0);
  int16_t* row = row_.data();
  const size_t col_offset = static_cast<size_t>(first_col - src.x_origin) * 3;
  const int taps = wx_.taps;
#if STOKER_RESIZE_AVX2
  const bool simd = simd_ && cpu_has_avx2();
  const bool wide = simd && avx512_ && cpu_has_avx512();
  const HorizontalAvx2Fn horizontal_simd = wide   ? horizontal_avx512_for(taps)
                                           : simd ? horizontal_avx2_for(taps)
                                                  : nullptr;
  if (simd) {
    // Per group of 2 (AVX2) or 4 (AVX-512) output pixels and tap pair, 8 lanes per pixel:
    // (w(i, k), w(i, k + 1)) x3, 0, 0; a tap past `taps` has weight 0.
    const int p_count = (taps + 1) / 2;
    const int group = wide ? 4 : 2;
    const int groups = out_w / group;
    pair_weights_.assign(static_cast<size_t>(groups) * p_count * group * 8, 0);
    auto weight = [&](int i, int k) -> int16_t {
      return k < taps ? wx_.fixed[static_cast<size_t>(i) * taps + k] : 0;
    };
    for (int j = 0; j < groups; ++j) {
      for (int p = 0; p < p_count; ++p) {
        int16_t* lanes = pair_weights_.data() + (static_cast<size_t>(j) * p_count + p) * group * 8;
        for (int g = 0; g < group; ++g) {
          for (int c = 0; c < 3; ++c) {
            lanes[8 * g + 2 * c] = weight(group * j + g, 2 * p);
            lanes[8 * g + 2 * c + 1] = weight(group * j + g, 2 * p + 1);
          }
        }
      }
    }
  } else {
    wide_.resize(static_cast<size_t>(col_len));
  }
#else
  wide_.resize(static_cast<size_t>(col_len));
#endif
  const HorizontalFn horizontal = horizontal_for(taps);
  for (int j = 0; j < out_h; ++j) {
    // Row j's own taps inside its padded window.
    const int16_t* wt =
        wy_.fixed.data() + static_cast<size_t>(j) * wy_.taps + (wy_.start[j] - wy_.padded_start[j]);
    const uint8_t* rows =
        src.data + static_cast<size_t>(wy_.start[j] - src.y_origin) * src.stride + col_offset;
    uint8_t* out = dst + static_cast<size_t>(j) * out_w * 3;
#if STOKER_RESIZE_AVX2
    if (simd) {
      if (wide) {
        vertical_row_avx512(rows, src.stride, wt, wy_.count[j], row, col_len);
      } else {
        vertical_row_avx2(rows, src.stride, wt, wy_.count[j], row, col_len);
      }
      horizontal_simd(row, out, wx_.padded_start.data(), pair_weights_.data(), wx_.fixed.data(),
                      out_w, first_col, taps, flip);
      continue;
    }
#endif
    vertical_row(rows, src.stride, wt, wy_.count[j], wide_.data(), row, col_len);
    horizontal(row, out, wx_.padded_start.data(), wx_.fixed.data(), out_w, first_col, taps, flip);
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
