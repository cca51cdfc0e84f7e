// GPU vs CPU for the low-precision optimizer states and block-wise quantization: identical
// parameters, bf16 bits (round to nearest and stochastic), 8-bit codes and absmax scales, on
// random inputs, including lists that mix state forms, a skipped step and several launches.
#include <gtest/gtest.h>

#include <vector>

#include "stoker/ops/elementwise.h"
#include "stoker/ops/fp8.h"
#include "stoker/ops/layout.h"
#include "stoker/ops/optim.h"
#include "stoker/optim/optimizer.h"
#include "test_util.h"

using stoker::Device;
using stoker::DType;
using stoker::Tensor;
using stoker::ops::StateTensor;
namespace ops = stoker::ops;

namespace {

const Device kGpu = Device::cuda(0);

Tensor normal(int64_t n, uint64_t seed, float std = 1.0f) {
  Tensor t = Tensor::empty({n}, DType::f32);
  ops::random_normal(t, 0.0f, std, seed, 0);
  return t;
}

// A state list in `form` for every tensor of at least `min_quantized` elements (f32 below,
// when form is u8), from random moment-like values (squared when !is_signed).
std::vector<StateTensor> states(const std::vector<int64_t>& sizes, DType form, bool is_signed,
                                int64_t block, int64_t min_quantized, uint64_t seed) {
  std::vector<StateTensor> out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    Tensor v = normal(sizes[i], seed + i, 1e-2f);
    if (!is_signed) ops::mul(v, v, v);
    StateTensor s;
    const DType f = (form == DType::u8 && sizes[i] < min_quantized) ? DType::f32 : form;
    if (f == DType::f32) {
      s.values = v;
    } else if (f == DType::bf16) {
      s.values = Tensor::empty(v.shape(), DType::bf16);
      ops::cast(s.values, v);
    } else {
      s.values = Tensor::empty(v.shape(), DType::u8);
      s.absmax = Tensor::empty({ops::quantization_blocks(sizes[i], block)}, DType::f32);
      ops::quantize_blockwise(s.values, s.absmax, v, is_signed, block);
    }
    out.push_back(s);
  }
  return out;
}

std::vector<StateTensor> to_gpu(const std::vector<StateTensor>& xs) {
  std::vector<StateTensor> out;
  for (const auto& s : xs)
    out.push_back({s.values.to(kGpu), s.absmax.defined() ? s.absmax.to(kGpu) : Tensor()});
  return out;
}
std::vector<Tensor> to_gpu(const std::vector<Tensor>& xs) {
  std::vector<Tensor> out;
  for (const auto& t : xs) out.push_back(t.to(kGpu));
  return out;
}

void expect_same(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(stoker::test::raw_bytes(a), stoker::test::raw_bytes(b)) << what;
}
void expect_same(const std::vector<StateTensor>& a, const std::vector<StateTensor>& b,
                 const std::string& what) {
  for (size_t i = 0; i < a.size(); ++i) {
    expect_same(a[i].values, b[i].values, what + " values " + std::to_string(i));
    if (a[i].absmax.defined())
      expect_same(a[i].absmax, b[i].absmax, what + " absmax " + std::to_string(i));
  }
}

const std::vector<int64_t> kSizes = {1, 7, 0, 1023, 65537, 4097, 200003, 3, 4096};

TEST(StatePrecisionGpuTest, QuantizeAndDequantizeMatchCpu) {
  STOKER_REQUIRE_GPU();
  for (const bool is_signed : {true, false})
    for (const int64_t block : {256, 2048, 4096}) {
      const int64_t n = 3 * block * 7 + 123;
      Tensor x = normal(n, block + is_signed, 0.1f);
      if (!is_signed) ops::mul(x, x, x);
      Tensor cc = Tensor::empty({n}, DType::u8),
             ac = Tensor::empty({ops::quantization_blocks(n, block)}, DType::f32);
      ops::quantize_blockwise(cc, ac, x, is_signed, block);
      Tensor cg = Tensor::empty({n}, DType::u8, kGpu);
      Tensor ag = stoker::test::poisoned(ac.shape(), DType::f32, kGpu);
      ops::fill(cg, 255.0);
      ops::quantize_blockwise(cg, ag, x.to(kGpu), is_signed, block);
      expect_same(cc, cg, "codes");
      expect_same(ac, ag, "absmax");
      Tensor dc = Tensor::empty({n}, DType::f32);
      Tensor dg = stoker::test::poisoned({n}, DType::f32, kGpu);
      ops::dequantize_blockwise(dc, cc, ac, is_signed, block);
      ops::dequantize_blockwise(dg, cg, ag, is_signed, block);
      expect_same(dc, dg, "dequantized");
    }
}

TEST(StatePrecisionGpuTest, AdamWCompactStateMatchesCpuBitForBit) {
  STOKER_REQUIRE_GPU();
  struct Case {
    DType form;
    int64_t block;
    bool stochastic;
  };
  for (const Case& c : {Case{DType::bf16, 2048, false}, Case{DType::bf16, 2048, true},
                        Case{DType::u8, 256, false}, Case{DType::u8, 2048, false}}) {
    SCOPED_TRACE(testing::Message() << c.form << " block " << c.block << " sr " << c.stochastic);
    std::vector<Tensor> pc, gc;
    for (size_t i = 0; i < kSizes.size(); ++i) {
      pc.push_back(normal(kSizes[i], 100 + i));
      gc.push_back(normal(kSizes[i], 200 + i));
    }
    auto mc = states(kSizes, c.form, true, c.block, 4096, 300);
    auto vc = states(kSizes, c.form, false, c.block, 4096, 400);
    auto pg = to_gpu(pc), gg = to_gpu(gc);
    auto mg = to_gpu(mc), vg = to_gpu(vc);
    const Tensor sc = ops::adamw_step_state_create(Device::cpu());
    const Tensor sg = ops::adamw_step_state_create(kGpu);
    Tensor fc = Tensor::from_floats({0.0f}, {});
    for (int s = 0; s < 4; ++s) {
      ops::fill(fc, s == 2 ? 1.0 : 0.0);  // step 2 overflows: skipped on both
      const Tensor fg = fc.to(kGpu);
      const ops::AdamWHyper h{.lr = 1e-2f, .weight_decay = 0.05f};
      const ops::StateStorage st{.block = c.block,
                                 .stochastic_rounding = c.stochastic,
                                 .seed = 7,
                                 .offset = static_cast<uint64_t>(s) * 1000003};
      ops::adamw_step(pc, gc, mc, vc, h, st, fc, sc);
      ops::adamw_step(pg, gg, mg, vg, h, st, fg, sg);
    }
    EXPECT_EQ(ops::adamw_step_state_steps(sg), 3);
    for (size_t i = 0; i < pc.size(); ++i) expect_same(pc[i], pg[i], "param " + std::to_string(i));
    expect_same(mc, mg, "exp_avg");
    expect_same(vc, vg, "exp_avg_sq");
  }
}

// The compact kernel reads aligned tensors in quads (float4 p and g, 4 bf16 or 4 codes per
// state) and the rest element by element: every other tensor here starts one element into its
// allocation, so one launch mixes both paths (and list offsets that are not multiples of 4,
// which pick the per-element rounding draws).
TEST(StatePrecisionGpuTest, MisalignedTensorsMatchCpuBitForBit) {
  STOKER_REQUIRE_GPU();
  for (const DType form : {DType::bf16, DType::u8})
    for (const bool stochastic : {false, true}) {
      if (form == DType::u8 && stochastic) continue;
      SCOPED_TRACE(testing::Message() << form << " sr " << stochastic);
      std::vector<Tensor> pc, gc, pg, gg;
      for (size_t i = 0; i < kSizes.size(); ++i) {
        pc.push_back(normal(kSizes[i], 800 + i));
        gc.push_back(normal(kSizes[i], 900 + i));
      }
      auto mc = states(kSizes, form, true, 2048, 4096, 1000);
      auto vc = states(kSizes, form, false, 2048, 4096, 1100);
      std::vector<StateTensor> mg, vg;
      for (size_t i = 0; i < kSizes.size(); ++i) {
        const int64_t off = i % 2;
        const auto at = [&](const Tensor& t) {  // a copy `off` elements into its block
          return t.numel() == 0 ? t.to(kGpu) : stoker::test::copy_at_offset(t, kGpu, off);
        };
        pg.push_back(at(pc[i]));
        gg.push_back(at(gc[i]));
        for (int k = 0; k < 2; ++k) {
          const StateTensor& s = k == 0 ? mc[i] : vc[i];
          (k == 0 ? mg : vg)
              .push_back({at(s.values), s.absmax.defined() ? s.absmax.to(kGpu) : Tensor()});
        }
      }
      for (int s = 1; s <= 3; ++s) {
        const ops::AdamWHyper h{.lr = 1e-2f, .weight_decay = 0.05f, .step = s};
        const ops::StateStorage st{.block = 2048,
                                   .stochastic_rounding = stochastic,
                                   .seed = 11,
                                   .offset = static_cast<uint64_t>(s) * 999983};
        ops::adamw_step(pc, gc, mc, vc, h, st);
        ops::adamw_step(pg, gg, mg, vg, h, st);
      }
      for (size_t i = 0; i < pc.size(); ++i)
        expect_same(pc[i], pg[i], "param " + std::to_string(i));
      expect_same(mc, mg, "exp_avg");
      expect_same(vc, vg, "exp_avg_sq");
    }
}

TEST(StatePrecisionGpuTest, SgdCompactMomentumMatchesCpuBitForBit) {
  STOKER_REQUIRE_GPU();
  for (const DType form : {DType::bf16, DType::u8}) {
    std::vector<Tensor> pc, gc;
    for (size_t i = 0; i < kSizes.size(); ++i) {
      pc.push_back(normal(kSizes[i], 500 + i));
      gc.push_back(normal(kSizes[i], 600 + i));
    }
    auto bc = states(kSizes, form, true, 256, 1000, 700);
    auto pg = to_gpu(pc), gg = to_gpu(gc);
    auto bg = to_gpu(bc);
    for (int s = 0; s < 3; ++s) {
      const ops::SgdHyper h{.lr = 0.05f,
                            .momentum = 0.9f,
                            .weight_decay = 1e-3f,
                            .nesterov = true,
                            .first_step = s == 0};
      ops::sgd_step(pc, gc, bc, h, {.block = 256});
      ops::sgd_step(pg, gg, bg, h, {.block = 256});
    }
    for (size_t i = 0; i < pc.size(); ++i) expect_same(pc[i], pg[i], "param " + std::to_string(i));
    expect_same(bc, bg, "momentum");
  }
}

// More tensors than one launch's parameter block holds: the list-wide element index (the
// stochastic rounding draws) and the 8-bit blocks continue across launches.
TEST(StatePrecisionGpuTest, ManyTensorsAcrossLaunchesMatchCpu) {
  STOKER_REQUIRE_GPU();
  std::vector<int64_t> sizes(700);
  for (size_t i = 0; i < sizes.size(); ++i) sizes[i] = 1 + static_cast<int64_t>((i * 997) % 5000);
  for (const DType form : {DType::bf16, DType::u8}) {
    std::vector<Tensor> pc, gc;
    for (size_t i = 0; i < sizes.size(); ++i) {
      pc.push_back(normal(sizes[i], 800 + i));
      gc.push_back(normal(sizes[i], 1800 + i));
    }
    auto mc = states(sizes, form, true, 256, 0, 2800),
         vc = states(sizes, form, false, 256, 0, 3800);
    auto pg = to_gpu(pc), gg = to_gpu(gc);
    auto mg = to_gpu(mc), vg = to_gpu(vc);
    const ops::StateStorage st{.block = 256, .stochastic_rounding = form == DType::bf16, .seed = 1};
    ops::adamw_step(pc, gc, mc, vc, {.step = 3}, st);
    ops::adamw_step(pg, gg, mg, vg, {.step = 3}, st);
    for (size_t i = 0; i < pc.size(); ++i) expect_same(pc[i], pg[i], "param " + std::to_string(i));
    expect_same(mc, mg, "exp_avg");
    expect_same(vc, vg, "exp_avg_sq");
  }
}

// The optimizer end to end on the GPU: 8-bit AdamW state equals the CPU's after a few steps,
// and state_bytes() is the same on both devices.
TEST(StatePrecisionGpuTest, OptimizerInt8StateMatchesCpu) {
  STOKER_REQUIRE_GPU();
  using namespace stoker::optim;
  stoker::nn::Parameter wc(normal(70001, 1)), bc(normal(100, 2));
  stoker::nn::Parameter wg(wc.value().to(kGpu)), bg(bc.value().to(kGpu));
  const AdamWOptions o{.state = {.dtype = StateDType::int8_blockwise, .block = 2048}};
  AdamW oc({{"w", &wc}, {"b", &bc}}, o), og({{"w", &wg}, {"b", &bg}}, o);
  for (int s = 0; s < 3; ++s) {
    const Tensor gw = normal(70001, 10 + s), gb = normal(100, 20 + s);
    ops::copy(wc.grad(), gw);
    ops::copy(bc.grad(), gb);
    ops::copy(wg.grad(), gw.to(kGpu));
    ops::copy(bg.grad(), gb.to(kGpu));
    oc.step();
    og.step();
  }
  expect_same(wc.value(), wg.value(), "w");
  const auto sc = oc.state(), sg = og.state();
  ASSERT_EQ(sc.size(), sg.size());
  for (size_t i = 0; i < sc.size(); ++i) expect_same(sc[i].second, sg[i].second, sc[i].first);
  EXPECT_EQ(oc.state_bytes(), og.state_bytes());
}

}  // namespace
