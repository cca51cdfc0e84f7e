#include "stoker/ops/fp8.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <vector>

#include "ops/quantize_math.h"
#include "ops/quantize_stubs.h"
#include "ops/validate.h"

namespace stoker::ops {

namespace {

// The dynamic tree map of quantize.h: `bits` magnitude bits (7 signed, 8 unsigned); a run of E
// zero bits, the indicator bit, F = bits - E - 1 fraction bits; magnitude
// 10^-E (0.1 + 0.9 (j + 1) / 2^F). Computed in double (10^-E by repeated division, exact
// IEEE operations), rounded once to float, sorted.
std::array<float, 256> build_map(bool is_signed) {
  const int bits = is_signed ? 7 : 8;
  std::vector<double> mags;
  double decade = 1.0;
  for (int e = 0; e < bits; ++e, decade /= 10.0) {
    const int f = bits - e - 1;
    const int steps = 1 << f;
    for (int j = 0; j < steps; ++j) mags.push_back(decade * (0.1 + 0.9 * (j + 1) / steps));
  }
  std::vector<float> v{0.0f};
  for (double m : mags) {
    v.push_back(static_cast<float>(m));
    if (is_signed) v.push_back(-static_cast<float>(m));
  }
  std::sort(v.begin(), v.end());
  STOKER_CHECK(static_cast<int>(v.size()) == dynamic_map_codes(is_signed) &&
                   std::adjacent_find(v.begin(), v.end()) == v.end(),
               "internal: dynamic map has ", v.size(), " entries or repeats one");
  std::array<float, 256> map{};
  std::copy(v.begin(), v.end(), map.begin());
  for (size_t i = v.size(); i < map.size(); ++i) map[i] = v.back();  // padding: never produced
  return map;
}

// The definition of a value's code (quantize_math.h): binary search for map[lo] <= x < map[lo + 1],
// then the nearer entry, ties to the lower. Used only to build the encode tables.
int nearest_by_search(const float* map, int codes, float x) {
  if (!(x > map[0])) return 0;
  if (x >= map[codes - 1]) return codes - 1;
  int lo = 0, hi = codes - 1;  // map[lo] <= x < map[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (map[mid] <= x)
      lo = mid;
    else
      hi = mid;
  }
  return map[hi] - x < x - map[lo] ? hi : lo;
}

// Floats in increasing order as unsigned integers (negative floats reversed below the positive).
uint32_t ordered_key(float f) {
  const uint32_t u = core::float_bits(f);
  return (u >> 31) ? ~u : (u | 0x80000000u);
}
float from_ordered_key(uint32_t k) { return core::bits_float((k >> 31) ? (k & 0x7fffffffu) : ~k); }

// The thresholds and the buckets of quantize_math.h's encode_nearest, from the search. Checks that
// no bucket holds more than kEncodeSteps thresholds (else encode_nearest would be wrong).
detail::EncodeTable build_encode_table(bool is_signed) {
  const auto& map = dynamic_map(is_signed);
  const int codes = dynamic_map_codes(is_signed);
  const auto code = [&](float x) { return nearest_by_search(map.data(), codes, x); };
  detail::EncodeTable t{};
  for (int j = 0; j + 1 < codes; ++j) {
    // code(map[j]) = j < code(map[j + 1]): the last float of code <= j lies in between.
    uint32_t lo = ordered_key(map[j]), hi = ordered_key(map[j + 1]);
    STOKER_CHECK(code(map[j]) == j && code(map[j + 1]) == j + 1, "internal: dynamic map entry ", j,
                 " does not encode to itself");
    while (hi - lo > 1) {
      const uint32_t mid = lo + (hi - lo) / 2;
      (code(from_ordered_key(mid)) <= j ? lo : hi) = mid;
    }
    t.above[j] = from_ordered_key(lo);
  }
  for (int j = codes - 1; j < static_cast<int>(std::size(t.above)); ++j)
    t.above[j] = std::numeric_limits<float>::infinity();
  for (int side = 0; side < 2; ++side)
    for (int b = 0; b < detail::kEncodeBuckets; ++b) {
      // Magnitude bits [low, high] of bucket b (encode_bucket's inverse).
      const uint32_t width = 1u << detail::kEncodeShift;
      uint32_t low, high;
      if (b == 0) {
        low = 0;
        high = ((detail::kEncodeLowKey + 1) << detail::kEncodeShift) - 1;
      } else if (b == detail::kEncodeBuckets - 1) {
        low = detail::kEncodeOneKey << detail::kEncodeShift;
        high = 0x7f800000u;  // +Inf
      } else {
        low = (detail::kEncodeLowKey + static_cast<uint32_t>(b)) << detail::kEncodeShift;
        high = low + width - 1;
      }
      float first = core::bits_float(low), last = core::bits_float(high);
      if (side == 1) {  // negative x: the bucket runs from -high to -low
        const float f = -last;
        last = -first;
        first = f;
      }
      const int c0 = code(first), c1 = code(last);
      STOKER_CHECK(c1 - c0 >= 0 && c1 - c0 <= detail::kEncodeSteps, "internal: encode bucket ", b,
                   " spans ", c1 - c0, " codes, more than kEncodeSteps");
      t.first[side * detail::kEncodeBuckets + b] = static_cast<uint8_t>(c0);
    }
  return t;
}

void check_block(const char* op, int64_t block) {
  STOKER_CHECK(block >= 256 && block <= 4096 && block % 256 == 0, "ops::", op, ": block size ",
               block, " must be a multiple of 256 between 256 and 4096 (256 or 2048 are usual)");
}

void check_quantized(const char* op, const Tensor& codes, const Tensor& absmax, const Tensor& x,
                     int64_t block) {
  detail::check_defined(op, "codes", codes);
  detail::check_defined(op, "absmax", absmax);
  detail::check_defined(op, "values", x);
  STOKER_CHECK(x.dtype() == DType::f32, "ops::", op, ": values must be f32, got ", x.str());
  STOKER_CHECK(codes.dtype() == DType::u8 && codes.numel() == x.numel(), "ops::", op,
               ": codes must be u8 with ", x.numel(), " elements, got ", codes.str());
  STOKER_CHECK(
      absmax.dtype() == DType::f32 && absmax.numel() == quantization_blocks(x.numel(), block),
      "ops::", op, ": absmax must be f32 with ", quantization_blocks(x.numel(), block),
      " elements (one per block of ", block, "), got ", absmax.str());
  detail::check_same_device(op, "codes", codes, "values", x);
  detail::check_same_device(op, "absmax", absmax, "values", x);
  detail::check_backend(op, x);
}

}  // namespace

const std::array<float, 256>& dynamic_map(bool is_signed) {
  static const std::array<float, 256> kSigned = build_map(true);
  static const std::array<float, 256> kUnsigned = build_map(false);
  return is_signed ? kSigned : kUnsigned;
}

uint8_t dynamic_map_encode(float x, bool is_signed) {
  return detail::encode_nearest(detail::encode_table(is_signed), x);
}

float dynamic_map_max_gap(bool is_signed) {
  const auto& m = dynamic_map(is_signed);
  float gap = 0.0f;
  for (int i = 1; i < dynamic_map_codes(is_signed); ++i) gap = std::max(gap, m[i] - m[i - 1]);
  return gap;
}

void quantize_blockwise(const Tensor& codes, const Tensor& absmax, const Tensor& x, bool is_signed,
                        int64_t block) {
  check_block("quantize_blockwise", block);
  check_quantized("quantize_blockwise", codes, absmax, x, block);
  if (x.numel() == 0) return;
  quantize_blockwise_stub(x.device(), codes, absmax, x, is_signed, block);
}

void dequantize_blockwise(const Tensor& out, const Tensor& codes, const Tensor& absmax,
                          bool is_signed, int64_t block) {
  check_block("dequantize_blockwise", block);
  check_quantized("dequantize_blockwise", codes, absmax, out, block);
  if (out.numel() == 0) return;
  dequantize_blockwise_stub(out.device(), out, codes, absmax, is_signed, block);
}

namespace detail {

const EncodeTable& encode_table(bool is_signed) {
  static const EncodeTable kSigned = build_encode_table(true);
  static const EncodeTable kUnsigned = build_encode_table(false);
  return is_signed ? kSigned : kUnsigned;
}

}  // namespace detail

}  // namespace stoker::ops
