// Block-wise 8-bit quantization with a dynamic (non-linear) map: how the 8-bit optimizer states
// are stored (optim/optimizer.h, ops/optim.h), also usable on its own.
//
// A tensor of n f32 values is cut into blocks of `block` consecutive values (the last one may be
// short). Each block keeps one f32 scale, its absolute maximum (absmax), and each value one u8
// code: the index of the nearest entry of a sorted 256-entry map of values in [-1, 1] (signed)
// or [0, 1] (unsigned) to value / absmax. Decoding is map[code] * absmax. The value that is
// the block's absmax decodes exactly (1.0 is in both maps); an all-zero block has absmax 0 and
// decodes to zeros.
//
// The maps ("dynamic tree quantization", after Dettmers et al., "8-bit Optimizers via
// Block-wise Quantization", 2021, built here from that description). A code's bits, after an
// optional sign bit, are: a run of E zero bits (the decimal exponent), a 1 bit (the
// indicator), then F = bits_left - E - 1 bits of linear fraction. The magnitude is
//   10^-E * (0.1 + 0.9 * (j + 1) / 2^F),   j = 0 .. 2^F - 1   (the fraction's bits)
// i.e. each decade (10^-(E+1), 10^-E] is split into 2^F equal steps, ending on 10^-E, and the
// code of all zeros is 0. Large values get many fraction bits, small values a wide exponent
// range (down to 1e-6 signed, 1e-7 unsigned): optimizer moments span many decades in a block.
//   signed (exp_avg, momentum): 1 sign bit, E = 0..6, F = 6 - E: 127 magnitudes, their
//     negatives and 0 = 255 distinct values; the table's last entry repeats 1.0 and is never
//     produced by quantization (the sign-magnitude "-0" code has no value of its own).
//   unsigned (exp_avg_sq): E = 0..7, F = 7 - E: 255 magnitudes and 0 = 256 values.
// The entries are kept sorted; codes are indices into the sorted table. The largest gap
// between neighbours is 0.9/64 (signed) and 0.9/128 (unsigned), in the top decade, so a round
// trip errs by at most max_gap / 2 * absmax (plus f32 rounding): `dynamic_map_max_gap`.
//
// Quantization picks the nearest entry (ties go to the lower entry; beyond either end the end's
// code; NaN code 0) with a lookup table over the float's exponent and top mantissa bits and two
// compares (as fast as a load, where a binary search costs 8 dependent loads). The CPU and the
// GPU run the same code on the same tables, so they produce identical codes.
// Stream: the device's compute stream. Thread-safe (the tables are built once, read-only).
#pragma once

#include <array>
#include <cstdint>

#include "stoker/core/tensor.h"

namespace stoker::ops {

// The sorted 256-entry table (see above) and how many of its entries quantization searches.
const std::array<float, 256>& dynamic_map(bool is_signed);
constexpr int dynamic_map_codes(bool is_signed) { return is_signed ? 255 : 256; }
// The largest distance between neighbouring searched entries of the map.
float dynamic_map_max_gap(bool is_signed);
// The code of one value already divided by its block's absmax (what quantize_blockwise and the
// 8-bit optimizer states store): the index of the nearest map entry.
uint8_t dynamic_map_encode(float x, bool is_signed);

// Scale blocks of a tensor of n values: ceil(n / block).
constexpr int64_t quantization_blocks(int64_t n, int64_t block) { return (n + block - 1) / block; }

// codes (u8, x's numel) and absmax (f32, quantization_blocks(numel, block)) from x (f32), all
// on one device. block: a multiple of 256 no larger than 4096. Unsigned maps clamp negative
// values to 0.
void quantize_blockwise(const Tensor& codes, const Tensor& absmax, const Tensor& x, bool is_signed,
                        int64_t block);
// out (f32) = map[codes] * absmax of each value's block.
void dequantize_blockwise(const Tensor& out, const Tensor& codes, const Tensor& absmax,
                          bool is_signed, int64_t block);

}  // namespace stoker::ops
