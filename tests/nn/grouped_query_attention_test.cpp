// nn::GroupedQueryAttention (nn/attention.h) on the CPU:
// - parameter names and shapes (Hugging Face's q|k|v rows in qkv_proj, o_proj), biases on request,
//   describe(), the resolved options;
// - forward against the composition in double: x W_qkv^T, RoPE (rotate-half at the positions, the
//   module's inverse frequencies), grouped-query causal attention (document-masked on request),
//   then o_proj — with no positions, positions for RoPE only, and positions with the mask; a
//   head_dim other than d_model / H;
// - gradients of every parameter and input element against finite differences (f32);
// - nn::Checkpoint around Residual(GroupedQueryAttention) blocks: outputs and gradients bit-
//   identical to the plain blocks (f32, bf16; positions and mask set), over two micro-batches;
// - a pending backward uses its forward's positions, whatever set_positions did since;
// - bad options and positions are clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "stoker/nn/attention.h"
#include "stoker/nn/containers.h"
#include "test_util.h"

namespace stoker::nn {
namespace {

GroupedQueryAttentionOptions gqa(int64_t heads, int64_t kv_heads, int64_t head_dim = 0) {
  return {.heads = heads,
          .kv_heads = kv_heads,
          .head_dim = head_dim,
          .rope = {.theta = 10000.0},
          .kernel = AttentionKernel::math};
}

TEST(GroupedQueryAttentionModule, ParametersAreQkvProjAndOProj) {
  GroupedQueryAttention attn(16, gqa(4, 2));
  const auto named = attn.named_parameters();
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[0].first, "qkv_proj.weight");
  EXPECT_EQ(named[0].second->shape(), (Shape{(4 + 2 * 2) * 4, 16}));
  EXPECT_EQ(named[1].first, "o_proj.weight");
  EXPECT_EQ(named[1].second->shape(), (Shape{16, 4 * 4}));
  EXPECT_EQ(attn.head_dim(), 4);
  EXPECT_EQ(attn.kv_heads(), 2);
  EXPECT_EQ(attn.options().rope.head_dim, 4);
  EXPECT_EQ(attn.describe(), "GroupedQueryAttention(d_model=16, heads=4, kv_heads=2, head_dim=4)");

  GroupedQueryAttentionOptions o = gqa(3, 0, 8);  // kv_heads 0: multi-head
  o.bias = true;
  GroupedQueryAttention mha(12, o);
  std::vector<std::string> names;
  for (const auto& [n, p] : mha.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"qkv_proj.weight", "qkv_proj.bias", "o_proj.weight",
                                             "o_proj.bias"}));
  EXPECT_EQ(mha.qkv_proj().weight().shape(), (Shape{9 * 8, 12}));
  EXPECT_EQ(mha.o_proj().weight().shape(), (Shape{12, 24}));
}

// The composition in double: x [B, T, C] -> y [B, T, C].
std::vector<double> composition(GroupedQueryAttention& m, const Tensor& x,
                                const std::vector<int64_t>& positions, bool mask) {
  const int64_t b = x.size(0), t = x.size(1), c = x.size(2);
  const int64_t h = m.heads(), kv = m.kv_heads(), d = m.head_dim(), w = (h + 2 * kv) * d;
  const std::vector<float> xv = x.to_floats();
  const std::vector<float> wq = m.qkv_proj().weight().value().to_floats();
  const std::vector<float> wo = m.o_proj().weight().value().to_floats();
  std::vector<double> qkv(static_cast<size_t>(b * t * w), 0.0);
  for (int64_t n = 0; n < b * t; ++n)
    for (int64_t o = 0; o < w; ++o)
      for (int64_t i = 0; i < c; ++i) qkv[n * w + o] += double(xv[n * c + i]) * wq[o * c + i];
  // RoPE on the query and key heads: angle = float(position) * inv_freq[i] in fp32.
  const std::vector<float> inv = ops::rope_inverse_frequencies(m.options().rope);
  auto pos = [&](int64_t bi, int64_t ti) {
    return positions.empty() ? ti : positions[static_cast<size_t>(bi * t + ti)];
  };
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t ti = 0; ti < t; ++ti)
      for (int64_t head = 0; head < h + kv; ++head)
        for (int64_t i = 0; i < d / 2; ++i) {
          const double angle = static_cast<float>(pos(bi, ti)) * inv[i];
          double* row = &qkv[static_cast<size_t>((bi * t + ti) * w + head * d)];
          const double a = row[i], bb = row[i + d / 2];
          row[i] = a * std::cos(angle) - bb * std::sin(angle);
          row[i + d / 2] = bb * std::cos(angle) + a * std::sin(angle);
        }
  // Grouped-query causal attention, document-masked when asked.
  std::vector<double> att(static_cast<size_t>(b * t * h * d), 0.0), s(static_cast<size_t>(t));
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t head = 0; head < h; ++head) {
      const int64_t ks = h + head / (h / kv), vs = h + kv + head / (h / kv);
      for (int64_t i = 0; i < t; ++i) {
        const int64_t first = mask ? i - std::clamp<int64_t>(pos(bi, i), 0, i) : 0;
        double mx = -INFINITY, sum = 0.0;
        for (int64_t j = first; j <= i; ++j) {
          double dot = 0.0;
          for (int64_t e = 0; e < d; ++e)
            dot += qkv[(bi * t + i) * w + head * d + e] * qkv[(bi * t + j) * w + ks * d + e];
          s[j] = dot / std::sqrt(double(d));
          mx = std::max(mx, s[j]);
        }
        for (int64_t j = first; j <= i; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (int64_t j = first; j <= i; ++j)
          for (int64_t e = 0; e < d; ++e)
            att[(bi * t + i) * h * d + head * d + e] +=
                s[j] / sum * qkv[(bi * t + j) * w + vs * d + e];
      }
    }
  std::vector<double> y(static_cast<size_t>(b * t * c), 0.0);
  for (int64_t n = 0; n < b * t; ++n)
    for (int64_t o = 0; o < c; ++o)
      for (int64_t i = 0; i < h * d; ++i) y[n * c + o] += att[n * h * d + i] * wo[o * h * d + i];
  return y;
}

// Documents of lengths 1, 3, 2, ... per row; row 1 starts inside a document and ends with
// padding (position 0).
std::vector<int64_t> document_positions(int64_t b, int64_t t) {
  const int64_t lengths[] = {1, 3, 2, 5, 1, 4};
  std::vector<int64_t> pos(static_cast<size_t>(b * t));
  for (int64_t r = 0; r < b; ++r) {
    int64_t p = r == 1 ? 6 : 0, k = r, length = r == 1 ? 9 : lengths[0];
    for (int64_t i = 0; i < t; ++i) {
      pos[static_cast<size_t>(r * t + i)] = r == 1 && i >= t - 2 ? 0 : p;
      if (++p == length) {
        p = 0;
        length = lengths[++k % 6];
      }
    }
  }
  return pos;
}

TEST(GroupedQueryAttentionModule, ForwardEqualsTheComposition) {
  struct Case {
    int64_t c, h, kv, d, b, t;
    bool positions, mask;
  };
  const Case cases[] = {{16, 4, 2, 0, 2, 7, false, false},
                        {12, 4, 1, 6, 2, 11, true, false},
                        {12, 4, 1, 6, 2, 11, true, true},
                        {16, 4, 4, 4, 1, 9, true, true},
                        {24, 6, 2, 8, 2, 13, true, true}};
  uint32_t seed = 10;
  for (const Case& k : cases) {
    SCOPED_TRACE(testing::Message()
                 << "C=" << k.c << " H=" << k.h << " KV=" << k.kv << " D=" << k.d << " T=" << k.t
                 << " positions=" << k.positions << " mask=" << k.mask);
    manual_seed(seed);
    GroupedQueryAttention m(k.c, gqa(k.h, k.kv, k.d));
    const std::vector<int64_t> pos =
        k.positions ? document_positions(k.b, k.t) : std::vector<int64_t>{};
    if (k.positions) m.set_positions(Tensor::from_vector(pos, {k.b, k.t}), k.mask);
    const Tensor x = test::random_tensor({k.b, k.t, k.c}, DType::f32, seed++, -1.5f, 1.5f);
    const std::vector<float> y = m.forward(x).to_floats();
    const std::vector<double> want = composition(m, x, pos, k.mask);
    ASSERT_EQ(y.size(), want.size());
    for (size_t i = 0; i < y.size(); ++i)
      ASSERT_NEAR(y[i], want[i], 2e-5 * (1.0 + std::fabs(want[i]))) << "y[" << i << "]";
  }
  // The mask and the positions both matter: each changes the output.
  manual_seed(3);
  GroupedQueryAttention m(12, gqa(4, 1, 6));
  const Tensor x = test::random_tensor({2, 11, 12}, DType::f32, 4);
  const Tensor plain = m.forward(x);
  const Tensor pos = Tensor::from_vector(document_positions(2, 11), {2, 11});
  m.set_positions(pos, false);
  const Tensor rope_only = m.forward(x);
  m.set_positions(pos, true);
  const Tensor masked = m.forward(x);
  EXPECT_FALSE(test::bit_identical(plain, rope_only));
  EXPECT_FALSE(test::bit_identical(rope_only, masked));
  m.set_positions(Tensor(), false);  // back to 0..T-1
  EXPECT_TRUE(test::bit_identical(m.forward(x), plain));
}

TEST(GroupedQueryAttentionModule, GradientsMatchFiniteDifferences) {
  for (bool positions : {false, true}) {
    SCOPED_TRACE(positions ? "document positions, masked" : "0..T-1");
    manual_seed(5);
    GroupedQueryAttention m(8, gqa(4, 2, 2));
    if (positions) m.set_positions(Tensor::from_vector(document_positions(2, 5), {2, 5}), true);
    test::check_gradients(m, test::random_tensor({2, 5, 8}, DType::f32, 6, -1.5f, 1.5f), 7);
  }
  manual_seed(8);
  GroupedQueryAttentionOptions o = gqa(2, 1, 4);
  o.bias = true;
  o.use_rope = false;
  GroupedQueryAttention m(6, o);
  test::check_gradients(m, test::random_tensor({1, 6, 6}, DType::f32, 9, -1.5f, 1.5f), 10);
}

struct Pass {
  std::vector<Tensor> ys, dxs;
};

Pass run(Module& m, DType dtype, const Shape& xs) {
  for (Parameter* p : m.parameters()) p->zero_grad();
  Pass out;
  for (int i = 0; i < 2; ++i) {  // two micro-batches: gradients accumulate
    const Tensor x = test::random_tensor(xs, dtype, 50 + i);
    out.ys.push_back(m.forward(x));
    out.dxs.push_back(m.backward(test::random_tensor(xs, dtype, 60 + i)));
  }
  return out;
}

std::unique_ptr<Sequential> block_stack(bool checkpoint, const Tensor& positions) {
  manual_seed(21);
  auto seq = make<Sequential>();
  for (int i = 0; i < 2; ++i) {
    auto attn = make<GroupedQueryAttention>(16, gqa(4, 2));
    attn->set_positions(positions, true);
    seq->add(make<Residual>(std::move(attn)));
  }
  if (checkpoint) EXPECT_EQ(checkpoint_every(*seq, 1), 2);
  return seq;
}

TEST(GroupedQueryAttentionModule, CheckpointGivesBitIdenticalGradients) {
  const Tensor pos = Tensor::from_vector(document_positions(3, 9), {3, 9});
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    auto plain = block_stack(false, pos), ckpt = block_stack(true, pos);
    const Pass a = run(*plain, dt, {3, 9, 16}), b = run(*ckpt, dt, {3, 9, 16});
    for (int i = 0; i < 2; ++i) {
      EXPECT_TRUE(test::bit_identical(b.ys[i], a.ys[i])) << "y of micro-batch " << i;
      EXPECT_TRUE(test::bit_identical(b.dxs[i], a.dxs[i])) << "dx of micro-batch " << i;
    }
    const auto pa = plain->named_parameters(), pb = ckpt->named_parameters();
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i) {
      EXPECT_EQ(pb[i].first, pa[i].first);
      EXPECT_TRUE(test::bit_identical(pb[i].second->grad(), pa[i].second->grad()))
          << "gradient of " << pa[i].first;
    }
  }
}

TEST(GroupedQueryAttentionModule, BackwardUsesItsForwardsPositions) {
  const Tensor x = test::random_tensor({2, 7, 12}, DType::f32, 31);
  const Tensor dy = test::random_tensor({2, 7, 12}, DType::f32, 32);
  const Tensor pos = Tensor::from_vector(document_positions(2, 7), {2, 7});
  std::vector<Tensor> dxs;
  for (bool changed : {false, true}) {
    manual_seed(33);
    GroupedQueryAttention m(12, gqa(3, 1, 4));
    m.set_positions(pos, true);
    m.forward(x);
    if (changed) m.set_positions(Tensor(), false);  // for the next forward only
    dxs.push_back(m.backward(dy));
  }
  EXPECT_TRUE(test::bit_identical(dxs[1], dxs[0]));
}

TEST(GroupedQueryAttentionModule, FusedChoiceRunsTheMathPathOnTheCpu) {
  const Tensor x = test::random_tensor({2, 5, 16}, DType::f32, 41);
  std::vector<Tensor> ys;
  for (AttentionKernel k : {AttentionKernel::math, AttentionKernel::fused}) {
    manual_seed(42);
    GroupedQueryAttentionOptions o = gqa(4, 2);
    o.kernel = k;
    GroupedQueryAttention m(16, o);
    ys.push_back(m.forward(x));
  }
  EXPECT_TRUE(test::bit_identical(ys[1], ys[0]));
}

TEST(GroupedQueryAttentionModule, BadOptionsAndPositionsAreClearErrors) {
  EXPECT_TRUE(test::throws_error_with([] { GroupedQueryAttention(16, gqa(4, 3)); },
                                      {"kv_heads=3", "must divide heads"}));
  EXPECT_TRUE(test::throws_error_with([] { GroupedQueryAttention(10, gqa(4, 2)); },
                                      {"not a multiple of heads", "head_dim explicitly"}));
  EXPECT_TRUE(test::throws_error_with([] { GroupedQueryAttention(12, gqa(4, 2, 3)); },
                                      {"even head_dim", "use_rope = false"}));
  EXPECT_TRUE(test::throws_error_with([] { GroupedQueryAttention(0, gqa(4, 2)); }, {"positive"}));

  GroupedQueryAttention m(16, gqa(4, 2));
  EXPECT_TRUE(test::throws_error_with(
      [&] {
        m.backward(Tensor::zeros({1, 3, 16}, DType::f32));
      },
      {"before forward"}));
  EXPECT_TRUE(test::throws_error_with([&] { m.set_positions(Tensor(), true); },
                                      {"document mask needs", "positions"}));
  EXPECT_TRUE(test::throws_error_with(
      [&] {
        m.set_positions(Tensor::zeros({1, 3}, DType::f32), true);
      },
      {"positions is f32[1, 3]", "i32 or i64 [B, T]"}));
  m.set_positions(Tensor::from_vector(std::vector<int32_t>(8), {2, 4}), true);
  EXPECT_TRUE(test::throws_error_with(
      [&] {
        m.forward(test::random_tensor({2, 3, 16}, DType::f32, 1));
      },
      {"positions i32[2, 4]", "do not fit", "[2, 3]", "set_positions"}));
  EXPECT_TRUE(test::throws_error_with(
      [&] {
        m.forward(test::random_tensor({2, 4, 12}, DType::f32, 1));
      },
      {"must be [B, T, 16]"}));
  {
    NoSaveScope no_save;  // a forward that saves nothing leaves nothing for backward
    m.forward(test::random_tensor({2, 4, 16}, DType::f32, 2));
  }
  EXPECT_TRUE(test::throws_error_with(
      [&] {
        m.backward(Tensor::zeros({2, 4, 16}, DType::f32));
      },
      {"before forward"}));
}

}  // namespace
}  // namespace stoker::nn
