// The op table on recorded timings (families, modules, achieved rates against the H200's roofs,
// idle time, the bandwidth-bound finding and its advice), the peaks table, and op timing for
// real through the Trainer on the CPU: every op of an MLP step is recorded under its module.
#include "diag/op_profile.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>

#include "stoker/core/op_listener.h"
#include "stoker/data/tensor_batches.h"
#include "stoker/diag/report.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/linear.h"
#include "stoker/nn/loss.h"
#include "stoker/ops/elementwise.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/trainer.h"

namespace diag = stoker::diag;
namespace core = stoker::core;
using stoker::DType;
using stoker::Tensor;

namespace {

diag::OpRecord op(const char* name, const char* module, double ms, double flops, double bytes,
                  DType dtype = DType::bf16) {
  return {name, module, {flops, bytes, dtype}, ms};
}

// A 10 ms step on an H200: a GEMM at half the tensor roof, a layer norm and an add near the
// bandwidth roof, a tiny ReLU far from it; 1.5 ms of the step in no op.
diag::OpStep recorded_step() {
  diag::OpStep s;
  s.step = 7;
  s.step_ms = 10;
  s.ops = {op("gemm", "blocks.0.mlp", 5.0, 2.5e12, 1e8),          // 500 TFLOP/s
           op("layernorm_forward", "blocks.0", 2.0, 8e8, 6.4e9),  // 3,200 GB/s
           op("add", "blocks.0", 1.0, 1e8, 3e9),                  // 3,000 GB/s
           op("relu_forward", "blocks.0.mlp", 0.5, 1e5, 1e6)};    // 2 GB/s
  return s;
}

const diag::OpRow& row(const std::vector<diag::OpRow>& rows, const std::string& key) {
  const auto it =
      std::find_if(rows.begin(), rows.end(), [&](const diag::OpRow& r) { return r.key == key; });
  EXPECT_NE(it, rows.end()) << key;
  static const diag::OpRow none;
  return it == rows.end() ? none : *it;
}

}  // namespace

TEST(OpProfileTest, PeaksComeFromTheModelName) {
  const diag::DevicePeaks h200 = diag::peaks_for_gpu("NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)");
  EXPECT_DOUBLE_EQ(h200.tensor_tflops, 989.4);
  EXPECT_DOUBLE_EQ(h200.bandwidth_gb_s, 4800);
  EXPECT_TRUE(h200.known());
  EXPECT_DOUBLE_EQ(diag::peaks_for_gpu("NVIDIA GH200 480GB").bandwidth_gb_s, 4000);
  EXPECT_DOUBLE_EQ(diag::peaks_for_gpu("NVIDIA H100 PCIe").tensor_tflops, 756);
  EXPECT_DOUBLE_EQ(diag::peaks_for_gpu("NVIDIA H100 80GB HBM3").bandwidth_gb_s, 3350);
  EXPECT_DOUBLE_EQ(diag::peaks_for_gpu("NVIDIA A100-SXM4-80GB").bandwidth_gb_s, 2039);
  EXPECT_DOUBLE_EQ(diag::peaks_for_gpu("NVIDIA A100-SXM4-40GB").bandwidth_gb_s, 1555);
  EXPECT_DOUBLE_EQ(diag::peaks_for_gpu("NVIDIA A10").tensor_tflops, 125);
  EXPECT_DOUBLE_EQ(diag::peaks_for_gpu("NVIDIA L4").bandwidth_gb_s, 300);
  EXPECT_DOUBLE_EQ(diag::peaks_for_gpu("NVIDIA L40S").bandwidth_gb_s, 864);
  const diag::DevicePeaks unknown = diag::peaks_for_gpu("Some Future GPU");
  EXPECT_FALSE(unknown.known());
  EXPECT_NE(unknown.source.find("unknown GPU 'Some Future GPU'"), std::string::npos);
  EXPECT_FALSE(diag::device_peaks(stoker::Device::cpu()).known());
  // Which roof an op is held to.
  EXPECT_DOUBLE_EQ(h200.compute_tflops(DType::bf16, false), 989.4);
  EXPECT_DOUBLE_EQ(h200.compute_tflops(DType::f32, true), 494.7);
  EXPECT_DOUBLE_EQ(h200.compute_tflops(DType::f32, false), 66.9);
  EXPECT_DOUBLE_EQ(h200.compute_tflops(DType::u8, false), 2 * 989.4);  // FP8 GEMMs
}

TEST(OpProfileTest, FamiliesOfTheBackendOps) {
  EXPECT_EQ(diag::op_family("gemm"), "matmul");
  EXPECT_EQ(diag::op_family("gemm_batched"), "matmul");
  EXPECT_EQ(diag::op_family("conv2d_backward_filter"), "convolution");
  EXPECT_EQ(diag::op_family("batchnorm_forward_train"), "batch norm");
  EXPECT_EQ(diag::op_family("layernorm_backward"), "layer norm");
  EXPECT_EQ(diag::op_family("add_layernorm_forward"), "layer norm");  // not "add": elementwise
  EXPECT_EQ(diag::op_family("flash_attention_forward"), "attention");
  EXPECT_EQ(diag::op_family("causal_softmax_backward"), "attention");
  EXPECT_EQ(diag::op_family("gelu_backward"), "elementwise");
  EXPECT_EQ(diag::op_family("add_bias"), "elementwise");
  EXPECT_EQ(diag::op_family("bias_grad"), "reduction");
  EXPECT_EQ(diag::op_family("maxpool2d_forward"), "pooling");
  EXPECT_EQ(diag::op_family("adamw_step"), "optimizer");
  EXPECT_EQ(diag::op_family("cross_entropy_forward"), "loss");
  EXPECT_EQ(diag::op_family("something_new"), "other");
}

TEST(OpProfileTest, TableOfRecordedTimings) {
  const diag::DevicePeaks h200 = diag::peaks_for_gpu("NVIDIA H200");
  // Two op-timed steps: per-step means.
  const diag::OpTable t = diag::summarize_ops({recorded_step(), recorded_step()}, h200);
  EXPECT_EQ(t.steps, 2);
  EXPECT_DOUBLE_EQ(t.step_ms, 10);
  EXPECT_DOUBLE_EQ(t.op_ms, 8.5);
  EXPECT_DOUBLE_EQ(t.idle_ms, 1.5);
  EXPECT_DOUBLE_EQ(t.idle_share, 0.15);
  ASSERT_EQ(t.families.size(), 3u);
  EXPECT_EQ(t.families[0].key, "matmul");  // most time first
  const diag::OpRow& mm = row(t.families, "matmul");
  EXPECT_DOUBLE_EQ(mm.calls, 1);
  EXPECT_DOUBLE_EQ(mm.share, 0.5);
  EXPECT_NEAR(mm.tflops, 500, 1e-9);
  EXPECT_NEAR(mm.compute_pct, 100 * 500 / 989.4, 1e-9);
  EXPECT_FALSE(mm.memory_bound);  // 25,000 FLOP/byte, far above the ridge (~206)
  const diag::OpRow& ln = row(t.ops, "layernorm_forward");
  EXPECT_NEAR(ln.gb_s, 3200, 1e-9);
  EXPECT_NEAR(ln.bandwidth_pct, 100 * 3200.0 / 4800, 1e-9);
  EXPECT_TRUE(ln.memory_bound);
  const diag::OpRow& ew = row(t.families, "elementwise");  // add + relu
  EXPECT_DOUBLE_EQ(ew.calls, 2);
  EXPECT_DOUBLE_EQ(ew.ms, 1.5);
  // Modules, with the family that takes most of their time.
  const diag::OpRow& block = row(t.modules, "blocks.0");
  EXPECT_DOUBLE_EQ(block.ms, 3.0);
  EXPECT_EQ(block.family, "layer norm");
  EXPECT_EQ(row(t.modules, "blocks.0.mlp").family, "matmul");
  // Bandwidth-bound: layer norm and add (near the roof), not the tiny relu (2 GB/s).
  EXPECT_DOUBLE_EQ(t.bandwidth_bound_share, 0.3);
  EXPECT_NEAR(t.bandwidth_bound_roof_pct, 100 * ((3200.0 * 2 + 3000.0 * 1) / 3) / 4800, 1e-9);
  EXPECT_EQ(t.fuse_candidates, (std::vector<std::string>{"layernorm_forward", "add"}));
  // Text and JSON.
  const std::string text = t.text();
  EXPECT_NE(text.find("idle 1.50 ms (15.0 %)"), std::string::npos) << text;
  EXPECT_NE(text.find("layernorm_forward"), std::string::npos) << text;
  EXPECT_NE(text.find("memory-bound"), std::string::npos) << text;
  const auto j = nlohmann::json::parse(t.json());
  EXPECT_EQ(j["families"][0]["key"], "matmul");
  EXPECT_DOUBLE_EQ(j["idle_share"].get<double>(), 0.15);
}

// A ResNet-like step, bandwidth-bound in its batch norms: the advice names both batch-norm
// fusions and the flag that turns them on in the classifier.
TEST(OpProfileTest, BatchNormAdviceNamesBothFusions) {
  diag::OpStep s;
  s.step = 3;
  s.step_ms = 10;
  s.ops = {op("conv2d_forward", "layer1.0.conv1", 3.0, 1.2e12, 4e8),
           op("batchnorm_forward_train", "layer1.0.bn1", 3.0, 6e8, 9e9),
           op("relu_forward", "layer1.0.relu", 1.5, 1e8, 4.5e9),
           op("add", "layer1.0", 1.5, 1e8, 4.5e9)};
  const diag::OpTable t = diag::summarize_ops({s}, diag::peaks_for_gpu("NVIDIA H200"));
  diag::Breakdown b;
  b.steps = 10;
  b.device_timed = true;
  b.compute_share = 1.0;
  const diag::Report r = diag::make_report(b, {}, {}, {}, t);
  ASSERT_EQ(r.verdict, diag::Verdict::bandwidth_bound) << r.text();
  std::string advice;
  for (const std::string& a : r.advice) advice += a + "\n";
  EXPECT_NE(advice.find("nn::BatchNorm2d::set_activation"), std::string::npos) << advice;
  EXPECT_NE(advice.find("relu(bn(x) + shortcut) into its last batch norm "
                        "(nn::Residual::set_tail_relu; stoker_classifier --fuse-bn-relu)"),
            std::string::npos)
      << advice;
}

TEST(OpProfileTest, WithoutPeaksOnlySharesAndRates) {
  const diag::OpTable t = diag::summarize_ops({recorded_step()}, diag::DevicePeaks{});
  const diag::OpRow& ln = row(t.ops, "layernorm_forward");
  EXPECT_EQ(ln.bandwidth_pct, -1);
  EXPECT_FALSE(ln.memory_bound);
  EXPECT_EQ(t.bandwidth_bound_share, 0);
  EXPECT_TRUE(diag::summarize_ops({}, diag::DevicePeaks{}).empty());
}

TEST(OpProfileTest, BandwidthBoundVerdictAndItsPlaceAmongTheOthers) {
  const diag::DevicePeaks h200 = diag::peaks_for_gpu("NVIDIA H200");
  const diag::OpTable t = diag::summarize_ops({recorded_step()}, h200);
  diag::Breakdown b;
  b.steps = 10;
  b.device_timed = true;
  b.compute_share = 1.0;
  // Nothing else: bandwidth-bound (moderate, 30 %), with the ops to fuse and the idle time.
  diag::Report r = diag::make_report(b, {}, {}, {}, t);
  EXPECT_EQ(r.verdict, diag::Verdict::bandwidth_bound) << r.text();
  EXPECT_EQ(r.level, diag::Level::moderate);
  EXPECT_NE(r.headline.find("30.0 % of the step is in memory-bound ops at"), std::string::npos)
      << r.headline;
  const std::string advice = [&] {
    std::string a;
    for (const std::string& s : r.advice) a += s + "\n";
    return a;
  }();
  EXPECT_NE(advice.find("fuse these memory-bound ops: layernorm_forward (2.00 ms/step, 67 % of "
                        "the roof), add"),
            std::string::npos)
      << advice;
  EXPECT_NE(advice.find("the GPU is idle 15.0 % of the step between ops"), std::string::npos)
      << advice;
  {  // On the CPU (host clock) the time between ops is the training thread's, not a GPU's.
    diag::OpTable cpu = t;
    cpu.device_timed = false;
    std::string text;
    for (const std::string& s : diag::make_report(b, {}, {}, {}, cpu).advice) text += s + "\n";
    EXPECT_EQ(text.find("the GPU is idle"), std::string::npos) << text;
    EXPECT_NE(text.find("the training thread spends 15.0 % of the step between ops"),
              std::string::npos)
        << text;
  }
  EXPECT_NE(r.text().find("diag  ops: 1 op-timed step"), std::string::npos) << r.text();
  // Of two moderate findings the larger share heads the report: bandwidth 30 % over input 8 %,
  // input is then an "also"; a stronger (high) input share takes the headline.
  b.input_share = 0.08;
  r = diag::make_report(b, {}, {}, {}, t);
  EXPECT_EQ(r.verdict, diag::Verdict::bandwidth_bound) << r.text();
  EXPECT_NE(r.text().find("also input: 8.0 % of the step (moderate)"), std::string::npos)
      << r.text();
  b.input_share = 0.35;
  r = diag::make_report(b, {}, {}, {}, t);
  EXPECT_EQ(r.verdict, diag::Verdict::input_bound);
  EXPECT_NE(r.text().find("also bandwidth-bound ops: 30.0 % of the step (moderate)"),
            std::string::npos)
      << r.text();
  b.input_share = 0.08;
  // A high bandwidth share beats moderate input.
  diag::OpStep heavy = recorded_step();
  heavy.ops[0].ms = 1.0;  // the GEMM shrinks: layer norm + add are 3 of 5.5 ms
  heavy.step_ms = 5.5;
  r = diag::make_report(b, {}, {}, {}, diag::summarize_ops({heavy}, h200));
  EXPECT_EQ(r.verdict, diag::Verdict::bandwidth_bound) << r.text();
  EXPECT_EQ(r.level, diag::Level::high);
  EXPECT_EQ(std::string(diag::verdict_name(r.verdict)), "bandwidth-bound");
}

// GEMMs whose rows are not whole 16-byte vectors (GPT-2's vocabulary of 50,257 unpadded) are
// counted, named by their shape and advised against; aligned ones and other ops are not.
TEST(OpProfileTest, MisalignedGemmsAreFoundAndAdvised) {
  const auto gemm = [](double ms, int64_t m, int64_t n, int64_t k, DType d = DType::bf16) {
    diag::OpRecord r = op("gemm", "", ms, 2.0 * m * n * k, 1e9, d);
    r.cost.m = m;
    r.cost.n = n;
    r.cost.k = k;
    return r;
  };
  diag::OpStep s;
  s.step_ms = 10;
  s.ops = {gemm(4.0, 16384, 768, 768),     // aligned
           gemm(3.0, 8192, 50257, 768),    // the head, unpadded vocabulary
           gemm(1.0, 50257, 768, 8192),    // its weight gradient
           op("add", "", 1.0, 1e8, 3e9)};  // not a GEMM
  EXPECT_FALSE(diag::gemm_misaligned(s.ops[0].cost));
  EXPECT_TRUE(diag::gemm_misaligned(s.ops[1].cost));
  EXPECT_FALSE(diag::gemm_misaligned(s.ops[3].cost));
  EXPECT_FALSE(diag::gemm_misaligned(gemm(1, 12, 20, 4, DType::f32).cost));  // f32: 4 per vector
  EXPECT_TRUE(diag::gemm_misaligned(gemm(1, 12, 20, 4, DType::bf16).cost));  // bf16: 8
  const diag::OpTable t = diag::summarize_ops({s, s}, diag::peaks_for_gpu("NVIDIA H100 80GB HBM3"));
  EXPECT_DOUBLE_EQ(t.misaligned_gemm_calls, 2);
  EXPECT_DOUBLE_EQ(t.misaligned_gemm_ms, 4.0);
  EXPECT_NEAR(t.misaligned_gemm_share, 0.4, 1e-12);
  EXPECT_EQ(t.misaligned_gemm_example, "8192 x 50257 x 768");
  EXPECT_NE(t.text().find("gemm alignment: 2 GEMM calls per step (4.00 ms, 40.0 % of the step)"),
            std::string::npos)
      << t.text();
  EXPECT_NE(t.json().find("\"misaligned_gemm\""), std::string::npos);
  diag::Breakdown b;
  b.steps = 10;
  b.device_timed = true;
  b.compute_share = 1.0;
  std::string advice;
  for (const std::string& a : diag::make_report(b, {}, {}, {}, t).advice) advice += a + "\n";
  EXPECT_NE(advice.find("GEMMs with a dimension that is not a multiple of 16 bytes take 40.0 % of "
                        "the step (4.00 ms, 2 calls; the slowest 8192 x 50257 x 768)"),
            std::string::npos)
      << advice;
  EXPECT_NE(advice.find("50,304"), std::string::npos) << advice;
  // 40 % of the step heads the report (high), even with a bandwidth-bound share beside it.
  const diag::Report headed = diag::make_report(b, {}, {}, {}, t);
  EXPECT_EQ(headed.verdict, diag::Verdict::misaligned_gemms);
  EXPECT_EQ(headed.level, diag::Level::high);
  EXPECT_EQ(std::string(diag::verdict_name(headed.verdict)), "misaligned-GEMMs");
  EXPECT_NE(headed.headline.find("misaligned GEMMs (high): 40.0 % of the step"), std::string::npos)
      << headed.headline;
  {  // GPT-2 with 50,257: 15 % bandwidth-bound, 49 % misaligned GEMMs -> the GEMMs.
    diag::OpStep g;
    g.step_ms = 10;
    g.ops = {gemm(4.9, 8192, 50257, 768), op("layernorm_forward", "", 1.5, 1e6, 3.2e9),
             gemm(3.6, 16384, 768, 768)};
    const diag::OpTable gt = diag::summarize_ops({g}, diag::peaks_for_gpu("NVIDIA H100 80GB HBM3"));
    ASSERT_GT(gt.bandwidth_bound_share, 0.14) << gt.text();
    const diag::Report gr = diag::make_report(b, {}, {}, {}, gt);
    EXPECT_EQ(gr.verdict, diag::Verdict::misaligned_gemms) << gr.text();
    EXPECT_NE(gr.text().find("also bandwidth-bound ops: 15.0 %"), std::string::npos) << gr.text();
  }
  // Aligned shapes only: no line, no advice.
  s.ops = {gemm(4.0, 16384, 768, 768), gemm(3.0, 8192, 50304, 768)};
  const diag::OpTable ok = diag::summarize_ops({s}, diag::peaks_for_gpu("NVIDIA H100 80GB HBM3"));
  EXPECT_EQ(ok.misaligned_gemm_calls, 0);
  EXPECT_EQ(ok.text().find("gemm alignment"), std::string::npos);
  advice.clear();
  for (const std::string& a : diag::make_report(b, {}, {}, {}, ok).advice) advice += a + "\n";
  EXPECT_EQ(advice.find("16 bytes"), std::string::npos) << advice;
}

// The advice names what to do per op: a chunked loss (several calls a step) is told to use
// larger chunks, a whole one to chunk; the optimizer to store fewer bytes of state.
TEST(OpProfileTest, FusionAdviceFollowsWhatTheOpAlreadyIs) {
  const diag::DevicePeaks h100 = diag::peaks_for_gpu("NVIDIA H100 80GB HBM3");
  diag::Breakdown b;
  b.steps = 10;
  b.device_timed = true;
  b.compute_share = 1.0;
  const auto advice_for = [&](int loss_calls) {
    diag::OpStep s;
    s.step_ms = 10;
    for (int i = 0; i < loss_calls; ++i)
      s.ops.push_back(op("cross_entropy_forward", "", 4.0 / loss_calls, 1e8, 8e9 / loss_calls));
    s.ops.push_back(op("adamw_step", "", 2.0, 1e8, 4e9, DType::f32));
    std::string a;
    for (const std::string& x :
         diag::make_report(b, {}, {}, {}, diag::summarize_ops({s}, h100)).advice)
      a += x + "\n";
    return a;
  };
  const std::string chunked = advice_for(7), whole = advice_for(1);
  EXPECT_NE(chunked.find("already runs a chunk of rows at a time"), std::string::npos) << chunked;
  EXPECT_EQ(chunked.find("nn::LinearCrossEntropyLoss"), std::string::npos) << chunked;
  EXPECT_NE(whole.find("a chunk of rows at a time (nn::LinearCrossEntropyLoss)"), std::string::npos)
      << whole;
  EXPECT_NE(whole.find("bf16 or 8-bit state"), std::string::npos) << whole;
}

// The listener sees each op once (the outermost) with its cost, and the module path.
TEST(OpProfileTest, ListenerSeesOpsWithCostsAndModules) {
  struct Recorder : core::OpListener {
    std::vector<std::pair<std::string, std::string>> seen;
    std::vector<core::OpCost> costs;
    void op_begin(const char* name, stoker::Device, const core::OpCost& c) override {
      seen.emplace_back(name, core::module_path());
      costs.push_back(c);
    }
    void op_end() override {}
  } rec;
  stoker::nn::manual_seed(1);
  stoker::nn::Sequential m;
  m.add("fc", stoker::nn::make<stoker::nn::Linear>(8, 4));
  m.add("act", stoker::nn::make<stoker::nn::ReLU>());
  Tensor x = Tensor::empty({16, 8}, DType::f32);
  stoker::ops::random_normal(x, 0.0f, 1.0f, 3, 0);
  core::set_op_listener(&rec);
  (void)m.forward(x);
  core::set_op_listener(nullptr);
  ASSERT_FALSE(rec.seen.empty());
  bool gemm = false, relu = false;
  for (size_t i = 0; i < rec.seen.size(); ++i) {
    if (rec.seen[i].first == "gemm") {
      gemm = true;
      EXPECT_EQ(rec.seen[i].second, "fc");
      EXPECT_DOUBLE_EQ(rec.costs[i].flops, 2.0 * 16 * 4 * 8);  // 2·m·n·k
      EXPECT_EQ(rec.costs[i].m, 16);
      EXPECT_EQ(rec.costs[i].n, 4);
      EXPECT_EQ(rec.costs[i].k, 8);
      EXPECT_GE(rec.costs[i].bytes, 4.0 * (16 * 8 + 8 * 4 + 16 * 4));
    }
    if (rec.seen[i].first == "relu_forward") {
      relu = true;
      EXPECT_EQ(rec.seen[i].second, "act");
    }
  }
  EXPECT_TRUE(gemm && relu);
  // Without a listener, scopes push nothing.
  {
    const core::ModuleScope s("x");
    EXPECT_TRUE(core::module_stack().empty());
  }
}

// For real on the CPU: the Trainer's diagnostics time one step in two op by op.
TEST(OpProfileTest, TrainerTimesStepsOpByOp) {
  namespace nn = stoker::nn;
  nn::manual_seed(7);
  nn::Sequential model;
  model.add(nn::make<nn::Linear>(64, 128));
  model.add(nn::make<nn::ReLU>());
  model.add(nn::make<nn::Linear>(128, 3));
  Tensor x = Tensor::empty({512, 64}, DType::f32);
  stoker::ops::random_normal(x, 0.0f, 1.0f, 1, 0);
  std::vector<int64_t> labels(512);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i % 3);
  stoker::data::TensorBatches batches(x, Tensor::from_vector(labels, {512}),
                                      {.batch_size = 64, .seed = 2});
  stoker::optim::AdamW opt(model.named_parameters());
  nn::CrossEntropyLoss loss;
  stoker::train::TrainerOptions o{.log_interval = 4, .progress_bar = false, .quiet = true};
  o.diagnostics.enabled = true;
  o.diagnostics.warmup_steps = 1;
  o.diagnostics.op_timing_interval = 2;
  stoker::train::Trainer trainer(model, loss, opt, o);
  const auto result = trainer.fit(batches, 2);  // 16 steps: 15 timed, 8 of them op by op
  const diag::OpTable& t = result.diagnosis.ops;
  EXPECT_EQ(t.steps, 8) << result.diagnosis.text();
  if (::testing::Test::HasFailure() || std::getenv("STOKER_TEST_SHOW"))
    std::puts(result.diagnosis.text().c_str());
  EXPECT_GT(t.step_ms, 0);
  EXPECT_GT(t.op_ms, 0);
  EXPECT_LE(t.op_ms, t.step_ms * 1.001);
  EXPECT_FALSE(t.peaks.known());  // the CPU
  const diag::OpRow& mm = row(t.families, "matmul");
  EXPECT_DOUBLE_EQ(mm.calls, 6);  // per step: 2 forward, dx and dw of both layers backward
  EXPECT_GT(mm.tflops, 0);
  EXPECT_GT(row(t.families, "optimizer").calls, 0);
  // Modules "0" and "2" (the Linears) hold the GEMMs.
  EXPECT_EQ(row(t.modules, "0").family, "matmul");
  EXPECT_EQ(row(t.modules, "2").family, "matmul");
  EXPECT_NE(result.diagnosis.text().find("diag  ops: 8 op-timed steps"), std::string::npos)
      << result.diagnosis.text();
}

// The gradient syncs' bucket reductions run on the comm stream beside the compute: counted as
// communication, not in the ops' sum; with the step's exposed communication, the hidden share.
TEST(OpProfileTest, CommunicationBesideTheOpsAndItsHiddenShare) {
  diag::OpStep s = recorded_step();
  s.ops.push_back(op(core::kGradSyncBucketOp, "blocks.0", 2.0, 0, 4e8, DType::f32));
  s.ops.push_back(op(core::kGradSyncBucketOp, "", 2.0, 0, 4e8, DType::f32));
  diag::OpTable t = diag::summarize_ops({s}, diag::peaks_for_gpu("NVIDIA H200"));
  EXPECT_DOUBLE_EQ(t.op_ms, 8.5);  // unchanged
  EXPECT_DOUBLE_EQ(t.comm_calls, 2);
  EXPECT_DOUBLE_EQ(t.comm_ms, 4.0);
  EXPECT_EQ(t.hidden_comm_share, -1);  // not known until the exposed part is
  t.set_exposed_comm(1.0);
  EXPECT_DOUBLE_EQ(t.hidden_comm_share, 0.75);
  EXPECT_NE(t.text().find("communication: 2 bucket all-reduces, 4.00 ms per step on the comm "
                          "stream, 75.0 % hidden behind backward, 1.00 ms exposed"),
            std::string::npos)
      << t.text();
  for (const diag::OpRow& r : t.families) EXPECT_NE(r.key, "communication");
  t.set_exposed_comm(6.0);  // more exposed than measured (the comm phase also waits): 0 hidden
  EXPECT_DOUBLE_EQ(t.hidden_comm_share, 0.0);
  EXPECT_EQ(diag::op_family(core::kGradSyncBucketOp), "communication");
}
