#include "stoker/ops/quantize.h"

#include <algorithm>
#include <vector>

#include "ops/backend.h"
#include "ops/quantize_backend.h"
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
  STOKER_DISPATCH(x.device(), quantize_blockwise, codes, absmax, x, dynamic_map(is_signed).data(),
                  dynamic_map_codes(is_signed), block);
}

void dequantize_blockwise(const Tensor& out, const Tensor& codes, const Tensor& absmax,
                          bool is_signed, int64_t block) {
  check_block("dequantize_blockwise", block);
  check_quantized("dequantize_blockwise", codes, absmax, out, block);
  if (out.numel() == 0) return;
  STOKER_DISPATCH(out.device(), dequantize_blockwise, out, codes, absmax,
                  dynamic_map(is_signed).data(), block);
}

}  // namespace stoker::ops
