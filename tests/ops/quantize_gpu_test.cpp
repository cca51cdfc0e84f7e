// GPU vs CPU of the 8-bit encoder (quantize_math.h's lookup table) in its two kernels: block-wise
// quantization on the values where an encoder could go wrong (every map entry, midpoint and
// bucket boundary with their float neighbours), and the 8-bit AdamW / SGD updates for every
// tiling of the kernel (blocks of 256 .. 4096 values: several quantization blocks per tile, one
// per tile with 1 to 4 passes), tensor lengths that end mid-quad, mid-block and mid-tile,
// misaligned tensors (scalar loads) and a NaN gradient. Codes, absmax scales and parameters
// must be identical bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/quantize_test_util.h"
#include "stoker/ops/elementwise.h"
#include "stoker/ops/fp8.h"
#include "stoker/ops/layout.h"
#include "stoker/ops/optim.h"
#include "test_util.h"

using stoker::Device;
using stoker::DType;
using stoker::Tensor;
using stoker::ops::StateTensor;
namespace ops = stoker::ops;

namespace {

const Device kGpu = Device::cuda(0);

// Identical bytes; for f32 tensors a NaN matches any NaN (the GPU's arithmetic returns the
// canonical NaN 0x7fffffff where the CPU's propagates the input's payload, 0x7fc00000 here).
void expect_same(const Tensor& a, const Tensor& b, const std::string& what) {
  const auto ra = stoker::test::raw_bytes(a), rb = stoker::test::raw_bytes(b);
  ASSERT_EQ(ra.size(), rb.size()) << what;
  if (a.dtype() == DType::f32) {
    const auto fa = a.to_vector<float>(), fb = b.to_vector<float>();
    for (size_t i = 0; i < fa.size(); ++i) {
      if (std::isnan(fa[i]) && std::isnan(fb[i])) continue;
      ASSERT_EQ(0, std::memcmp(&fa[i], &fb[i], sizeof(float)))
          << what << " element " << i << ": " << fa[i] << " vs " << fb[i];
    }
    return;
  }
  for (size_t i = 0; i < ra.size(); ++i) ASSERT_EQ(ra[i], rb[i]) << what << " byte " << i;
}

TEST(QuantizeGpuTest, BoundaryValuesEncodeLikeCpuAndTheSearch) {
  STOKER_REQUIRE_GPU();
  for (const bool is_signed : {true, false})
    for (const int64_t block : {256, 2048}) {
      SCOPED_TRACE(testing::Message() << (is_signed ? "signed" : "unsigned") << " block " << block);
      const std::vector<float> v = stoker::test::probe_blocks(is_signed, block);
      const int64_t n = static_cast<int64_t>(v.size());
      const Tensor x = Tensor::from_floats(v, {n});
      const int64_t blocks = ops::quantization_blocks(n, block);
      Tensor cc = Tensor::empty({n}, DType::u8), ac = Tensor::empty({blocks}, DType::f32);
      ops::quantize_blockwise(cc, ac, x, is_signed, block);
      Tensor cg = Tensor::empty({n}, DType::u8, kGpu);
      Tensor ag = stoker::test::poisoned({blocks}, DType::f32, kGpu);
      ops::fill(cg, 255.0);
      ops::quantize_blockwise(cg, ag, x.to(kGpu), is_signed, block);
      expect_same(cc, cg, "codes");
      expect_same(ac, ag, "absmax");
      // And both are the search's codes (absmax 1: the codes of the values themselves).
      const auto& m = ops::dynamic_map(is_signed);
      const int codes = ops::dynamic_map_codes(is_signed);
      const auto got = cg.to_vector<uint8_t>();
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(got[i], stoker::test::nearest_by_search(m, codes, v[i]))
            << "element " << i << " x = " << v[i];
    }
}

Tensor normal(int64_t n, uint64_t seed, float std) {
  Tensor t = Tensor::empty({n}, DType::f32);
  ops::random_normal(t, 0.0f, std, seed, 0);
  return t;
}

// A random 8-bit state of n values (moment-like: squared when !is_signed).
StateTensor q8_state(int64_t n, bool is_signed, int64_t block, uint64_t seed) {
  Tensor v = normal(n, seed, 1e-2f);
  if (!is_signed) ops::mul(v, v, v);
  StateTensor s{Tensor::empty({n}, DType::u8),
                Tensor::empty({ops::quantization_blocks(n, block)}, DType::f32)};
  ops::quantize_blockwise(s.values, s.absmax, v, is_signed, block);
  return s;
}

// The same tensors on the GPU, `offset` elements into their blocks (1: misaligned).
Tensor on_gpu(const Tensor& t, int64_t offset) {
  return stoker::test::copy_at_offset(t, kGpu, offset);
}
StateTensor on_gpu(const StateTensor& s, int64_t offset) {
  return {on_gpu(s.values, offset), s.absmax.to(kGpu)};
}

// Lengths that end mid-quad, mid-block, mid-tile and on a tile; all >= 4096 (quantized).
const std::vector<int64_t> kLengths = {4096, 4099, 5000, 8191, 12289, 20483};

TEST(QuantizeGpuTest, EightBitAdamWAndSgdMatchCpuForEveryTiling) {
  STOKER_REQUIRE_GPU();
  for (const int64_t block : {256, 512, 768, 1024, 1280, 2048, 3072, 4096})
    for (const int64_t offset : {0, 1}) {
      SCOPED_TRACE(testing::Message() << "block " << block << " offset " << offset);
      std::vector<Tensor> pc, gc, pg, gg;
      std::vector<StateTensor> mc, vc, bc, mg, vg, bg;
      for (size_t i = 0; i < kLengths.size(); ++i) {
        const int64_t n = kLengths[i];
        pc.push_back(normal(n, 10 + i, 1.0f));
        gc.push_back(normal(n, 20 + i, 1e-2f));
        mc.push_back(q8_state(n, true, block, 30 + i));
        vc.push_back(q8_state(n, false, block, 40 + i));
        bc.push_back(q8_state(n, true, block, 50 + i));
      }
      // A NaN gradient: its parameter and states turn NaN (code 0), the block's absmax ignores it.
      static_cast<float*>(gc[2].data())[77] = std::numeric_limits<float>::quiet_NaN();
      // Misalign every other tensor only, so one launch mixes quad and scalar loads.
      for (size_t i = 0; i < kLengths.size(); ++i) {
        const int64_t off = (i % 2 == 1) ? offset : 0;
        pg.push_back(on_gpu(pc[i], off));
        gg.push_back(on_gpu(gc[i], off));
        mg.push_back(on_gpu(mc[i], off));
        vg.push_back(on_gpu(vc[i], off));
        bg.push_back(on_gpu(bc[i], off));
      }
      std::vector<Tensor> qc, qg;  // SGD's parameters: copies of the AdamW ones
      for (size_t i = 0; i < kLengths.size(); ++i) {
        qc.push_back(pc[i].clone());
        qg.push_back(on_gpu(pc[i], i % 2 == 1 ? offset : 0));
      }
      const ops::StateStorage st{.block = block};
      for (int s = 1; s <= 3; ++s) {
        const ops::AdamWHyper h{.lr = 1e-2f, .weight_decay = 0.05f, .step = s};
        ops::adamw_step(pc, gc, mc, vc, h, st);
        ops::adamw_step(pg, gg, mg, vg, h, st);
        const ops::SgdHyper sh{.lr = 0.1f, .momentum = 0.9f, .nesterov = s == 2};
        ops::sgd_step(qc, gc, bc, sh, st);
        ops::sgd_step(qg, gg, bg, sh, st);
      }
      for (size_t i = 0; i < kLengths.size(); ++i) {
        const std::string at = " of tensor " + std::to_string(i);
        expect_same(pc[i], pg[i], "AdamW param" + at);
        expect_same(mc[i].values, mg[i].values, "exp_avg codes" + at);
        expect_same(mc[i].absmax, mg[i].absmax, "exp_avg absmax" + at);
        expect_same(vc[i].values, vg[i].values, "exp_avg_sq codes" + at);
        expect_same(vc[i].absmax, vg[i].absmax, "exp_avg_sq absmax" + at);
        expect_same(qc[i], qg[i], "SGD param" + at);
        expect_same(bc[i].values, bg[i].values, "momentum codes" + at);
        expect_same(bc[i].absmax, bg[i].absmax, "momentum absmax" + at);
      }
      // The NaN gradient reached the CPU result (so the comparison covered it).
      EXPECT_TRUE(std::isnan(static_cast<const float*>(pc[2].data())[77]));
    }
}

}  // namespace
