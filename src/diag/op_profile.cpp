#include "diag/op_profile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "stoker/core/error.h"

namespace stoker::diag {

namespace {

bool has(std::string_view s, std::string_view p) { return s.find(p) != std::string_view::npos; }
bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::string fixed(double v, int digits) {
  char b[64];
  std::snprintf(b, sizeof(b), "%.*f", digits, v);
  return b;
}

struct Acc {
  double calls = 0, ms = 0, flops = 0, bytes = 0;
  double roof_s = 0;  // the time its FLOPs take at their dtypes' compute roofs
  std::map<std::string, double> family_ms;
  DType dtype = DType::f32;
};

}  // namespace

double DevicePeaks::compute_tflops(DType dtype, bool tf32) const {
  if (dtype == DType::bf16 || dtype == DType::f16) return tensor_tflops;
  // u8 operands are FP8 codes (ops::gemm_fp8): the FP8 tensor cores run at twice the bf16 rate
  // on every GPU that has them (Ada, Hopper, Blackwell datasheets).
  if (dtype == DType::u8) return 2 * tensor_tflops;
  if (dtype == DType::f32 && tf32) return tf32_tflops;
  return fp32_tflops;
}

DevicePeaks peaks_for_gpu(std::string_view name) {
  // Datasheet peaks: dense bf16 tensor, dense tf32 tensor, fp32 (CUDA cores), memory GB/s.
  struct Row {
    const char* match;
    const char* also;  // a second substring that must be present ("" for none)
    double tensor, tf32, fp32, gb_s;
  };
  // More specific names first (GH200 before H200, H100 PCIe / NVL before H100).
  static const Row kRows[] = {
      {"GH200", "", 989.4, 494.7, 66.9, 4000},    {"H200", "", 989.4, 494.7, 66.9, 4800},
      {"H100", "PCIe", 756.0, 378.0, 51.2, 2000}, {"H100 NVL", "", 835.0, 417.5, 60.0, 3900},
      {"H100", "", 989.4, 494.7, 66.9, 3350},     {"B200", "", 2250, 1100, 80.0, 8000},
      {"A100", "80GB", 312.0, 156.0, 19.5, 2039}, {"A100", "", 312.0, 156.0, 19.5, 1555},
      {"L40S", "", 362.1, 183.0, 91.6, 864},      {"L40", "", 181.0, 90.5, 90.5, 864},
      {"L4", "", 121.0, 60.0, 30.3, 300},         {"A10", "", 125.0, 62.5, 31.2, 600},
      {"RTX 4090", "", 165.2, 82.6, 82.6, 1008},
  };
  DevicePeaks p;
  for (const Row& r : kRows) {
    if (!has(name, r.match) || (*r.also && !has(name, r.also))) continue;
    if (std::string_view(r.match) == "A10" && has(name, "A100")) continue;
    if (std::string_view(r.match) == "L4" && has(name, "L40")) continue;
    p.source = "table: " + std::string(r.match) + (*r.also ? std::string(" ") + r.also : "");
    p.tensor_tflops = r.tensor;
    p.tf32_tflops = r.tf32;
    p.fp32_tflops = r.fp32;
    p.bandwidth_gb_s = r.gb_s;
    return p;
  }
  p.source = "unknown GPU '" + std::string(name) + "' (no peaks: shares and rates only)";
  return p;
}

DevicePeaks device_peaks(Device device) {
  if (device.is_cpu()) return {.source = "cpu (no peaks: shares and rates only)"};
  try {
    return peaks_for_gpu(core::describe_device(device));
  } catch (const Error& e) {
    return {.source = std::string("unknown (") + e.what() + ")"};
  }
}

std::string op_family(std::string_view n) {
  if (n == core::kGradSyncBucketOp) return "communication";
  if (starts_with(n, "gemm")) return "matmul";
  if (starts_with(n, "fp8_")) return "elementwise";  // FP8 casts (ops/fp8.h), not optimizer state
  if (starts_with(n, "conv2d")) return "convolution";
  if (starts_with(n, "batchnorm")) return "batch norm";
  if (starts_with(n, "layernorm") || starts_with(n, "add_layernorm")) return "layer norm";
  if (has(n, "attention") || starts_with(n, "causal_softmax") || starts_with(n, "heads_from") ||
      starts_with(n, "tokens_from"))
    return "attention";
  if (starts_with(n, "bias_grad") || starts_with(n, "channel_bias_grad") || n == "reduce")
    return "reduction";
  if (has(n, "pool")) return "pooling";
  if (starts_with(n, "embedding")) return "embedding";
  if (starts_with(n, "cross_entropy") || starts_with(n, "mse")) return "loss";
  if (starts_with(n, "adamw") || starts_with(n, "sgd") || starts_with(n, "clip") ||
      starts_with(n, "unscale") || starts_with(n, "update_scale") ||
      starts_with(n, "loss_monitor") || has(n, "quantize"))
    return "optimizer";
  if (starts_with(n, "convert_layout") || starts_with(n, "normalize_images")) return "layout";
  if (starts_with(n, "random")) return "random";
  if (starts_with(n, "relu") || starts_with(n, "gelu") || starts_with(n, "dropout") || n == "add" ||
      n == "mul" || n == "axpy" || starts_with(n, "scale") || starts_with(n, "add_bias") ||
      starts_with(n, "add_channel_bias") || n == "fill" || starts_with(n, "cast"))
    return "elementwise";
  return "other";
}

bool gemm_misaligned(const core::OpCost& c) {
  if (c.m <= 0 || c.n <= 0 || c.k <= 0) return false;  // not a GEMM
  const int64_t v = static_cast<int64_t>(16 / std::max<size_t>(1, core::dtype_size(c.dtype)));
  return c.m % v != 0 || c.n % v != 0 || c.k % v != 0;
}

OpTable summarize_ops(const std::vector<OpStep>& steps, const DevicePeaks& peaks, bool tf32,
                      double near_bandwidth_roof) {
  constexpr size_t kFuseCandidates = 4;         // ops named in the advice
  constexpr double kFarFromComputeRoof = 0.10;  // below 10 % of the compute roof
  OpTable t;
  t.peaks = peaks;
  if (steps.empty()) return t;
  t.steps = static_cast<int64_t>(steps.size());
  const double n = static_cast<double>(steps.size());
  std::map<std::string, Acc> families, modules, ops;
  double total_flops = 0;
  double slowest_misaligned = -1;
  for (const OpStep& s : steps) {
    t.step_ms += s.step_ms / n;
    for (const OpRecord& r : s.ops) {
      const std::string fam = op_family(r.name);
      if (gemm_misaligned(r.cost)) {
        t.misaligned_gemm_calls += 1 / n;
        t.misaligned_gemm_ms += r.ms / n;
        if (r.ms > slowest_misaligned) {
          slowest_misaligned = r.ms;
          t.misaligned_gemm_example = std::to_string(r.cost.m) + " x " + std::to_string(r.cost.n) +
                                      " x " + std::to_string(r.cost.k);
        }
      }
      if (fam == "communication") {  // on the comm stream, beside the compute
        t.comm_calls += 1 / n;
        t.comm_ms += r.ms / n;
        continue;
      }
      for (Acc* a :
           {&families[fam], &modules[r.module.empty() ? "(top level)" : r.module], &ops[r.name]}) {
        a->calls += 1 / n;
        a->ms += r.ms / n;
        a->flops += r.cost.flops / n;
        a->bytes += r.cost.bytes / n;
        a->family_ms[fam] += r.ms / n;
        const double roof = peaks.compute_tflops(r.cost.dtype, tf32);
        if (roof > 0) a->roof_s += r.cost.flops / (roof * 1e12) / n;
      }
      t.op_ms += r.ms / n;
      total_flops += r.cost.flops / n;
    }
  }
  t.misaligned_gemm_share =
      std::max(t.step_ms, t.op_ms) > 0 ? t.misaligned_gemm_ms / std::max(t.step_ms, t.op_ms) : 0;
  t.idle_ms = std::max(0.0, t.step_ms - t.op_ms);
  t.idle_share = t.step_ms > 0 ? t.idle_ms / t.step_ms : 0;
  t.tflops = t.step_ms > 0 ? total_flops / (t.step_ms * 1e-3) * 1e-12 : 0;
  const double denom = std::max(t.step_ms, t.op_ms);
  const auto rows = [&](const std::map<std::string, Acc>& m) {
    std::vector<OpRow> out;
    for (const auto& [key, a] : m) {
      OpRow r;
      r.key = key;
      r.family = std::max_element(a.family_ms.begin(), a.family_ms.end(),
                                  [](const auto& x, const auto& y) { return x.second < y.second; })
                     ->first;
      r.calls = a.calls;
      r.ms = a.ms;
      r.share = denom > 0 ? a.ms / denom : 0;
      const double s = a.ms * 1e-3;
      r.tflops = s > 0 ? a.flops / s * 1e-12 : 0;
      r.gb_s = s > 0 ? a.bytes / s * 1e-9 : 0;
      r.intensity = a.bytes > 0 ? a.flops / a.bytes : 0;
      if (peaks.known()) {
        // Rows mixing dtypes: the roof their FLOPs would run at (time-weighted by FLOPs).
        const double roof =
            a.roof_s > 0 ? a.flops / a.roof_s * 1e-12 : peaks.compute_tflops(DType::bf16, tf32);
        r.compute_pct = s > 0 ? 100.0 * a.roof_s / s : 0;
        r.bandwidth_pct = 100.0 * r.gb_s / peaks.bandwidth_gb_s;
        const double ridge = roof * 1e12 / (peaks.bandwidth_gb_s * 1e9);  // FLOPs per byte
        r.memory_bound = r.intensity < ridge;
      }
      out.push_back(r);
    }
    std::sort(out.begin(), out.end(), [](const OpRow& x, const OpRow& y) { return x.ms > y.ms; });
    return out;
  };
  t.families = rows(families);
  t.modules = rows(modules);
  t.ops = rows(ops);
  // Bandwidth-bound: op names (each a kernel kind) below the ridge and near the bandwidth roof.
  double bound_ms = 0, bound_bytes = 0;
  for (const OpRow& r : t.ops) {
    // Near the bandwidth roof and far from the compute roof (a GEMM or convolution near the
    // ridge point that reaches a good share of both is not held back by bytes alone).
    if (!r.memory_bound || r.bandwidth_pct < 100.0 * near_bandwidth_roof ||
        r.compute_pct >= 100.0 * kFarFromComputeRoof)
      continue;
    bound_ms += r.ms;
    bound_bytes += r.gb_s * r.ms;
    if (t.fuse_candidates.size() < kFuseCandidates) t.fuse_candidates.push_back(r.key);
  }
  t.bandwidth_bound_share = denom > 0 ? bound_ms / denom : 0;
  t.bandwidth_bound_roof_pct =
      bound_ms > 0 && peaks.known() ? 100.0 * (bound_bytes / bound_ms) / peaks.bandwidth_gb_s : 0;
  return t;
}

std::string OpTable::text(size_t top) const {
  if (empty()) return "";
  std::string s;
  const auto line = [&](const std::string& l) { s += "diag  " + l + "\n"; };
  line("ops: " + std::to_string(steps) + " op-timed step" + (steps == 1 ? "" : "s") + ", " +
       fixed(step_ms, 2) + " ms " + (device_timed ? "device" : "host") + " per step, ops " +
       fixed(op_ms, 2) + " ms, idle " + fixed(idle_ms, 2) + " ms (" + fixed(100 * idle_share, 1) +
       " %), " + fixed(tflops, 1) + " TFLOP/s" + (peaks.known() ? "" : "; " + peaks.source));
  const auto table = [&](const char* what, const std::vector<OpRow>& rows) {
    char b[256];
    std::snprintf(b, sizeof(b), "  %-28s %7s %9s %6s %8s %8s %7s %7s", what, "calls", "ms/step",
                  "share", "TFLOP/s", "GB/s", "%comp", "%bw");
    line(b);
    for (size_t i = 0; i < rows.size() && i < top; ++i) {
      const OpRow& r = rows[i];
      const std::string key = r.key.size() > 28 ? "..." + r.key.substr(r.key.size() - 25) : r.key;
      const bool whole = std::abs(r.calls - std::round(r.calls)) < 1e-9;
      std::snprintf(b, sizeof(b), "  %-28s %7s %9.3f %5.1f%% %8.2f %8.0f %7s %7s%s", key.c_str(),
                    fixed(r.calls, whole ? 0 : 2).c_str(), r.ms, 100 * r.share, r.tflops, r.gb_s,
                    r.compute_pct < 0 ? "-" : fixed(r.compute_pct, 1).c_str(),
                    r.bandwidth_pct < 0 ? "-" : fixed(r.bandwidth_pct, 1).c_str(),
                    r.memory_bound ? "  memory-bound" : "");
      line(b);
    }
  };
  if (comm_calls > 0)
    line("communication: " + fixed(comm_calls, 0) + " bucket all-reduces, " + fixed(comm_ms, 2) +
         " ms per step on the comm stream" +
         (hidden_comm_share >= 0
              ? ", " + fixed(100 * hidden_comm_share, 1) + " % hidden behind backward, " +
                    fixed(exposed_comm_ms, 2) + " ms exposed"
              : ""));
  table("family", families);
  table("module", modules);
  table("op", ops);
  if (misaligned_gemm_calls > 0)
    line("gemm alignment: " + fixed(misaligned_gemm_calls, 0) + " GEMM call" +
         (misaligned_gemm_calls >= 1.5 ? "s" : "") + " per step (" + fixed(misaligned_gemm_ms, 2) +
         " ms, " + fixed(100 * misaligned_gemm_share, 1) +
         " % of the step) with a dimension that is not a multiple of 16 bytes, the slowest " +
         misaligned_gemm_example + " (m x n x k)");
  return s;
}

void OpTable::set_exposed_comm(double exposed_ms) {
  exposed_comm_ms = exposed_ms;
  hidden_comm_share =
      comm_ms > 0 && exposed_ms >= 0 ? std::clamp(1.0 - exposed_ms / comm_ms, 0.0, 1.0) : -1;
}

std::string OpTable::json() const {
  using nlohmann::json;
  const auto rows = [](const std::vector<OpRow>& v) {
    json a = json::array();
    for (const OpRow& r : v)
      a.push_back({{"key", r.key},
                   {"family", r.family},
                   {"calls", r.calls},
                   {"ms", r.ms},
                   {"share", r.share},
                   {"tflops", r.tflops},
                   {"gb_s", r.gb_s},
                   {"intensity", r.intensity},
                   {"compute_pct", r.compute_pct},
                   {"bandwidth_pct", r.bandwidth_pct},
                   {"memory_bound", r.memory_bound}});
    return a;
  };
  json j = {{"steps", steps},
            {"device_timed", device_timed},
            {"step_ms", step_ms},
            {"op_ms", op_ms},
            {"idle_ms", idle_ms},
            {"idle_share", idle_share},
            {"tflops", tflops},
            {"comm_calls", comm_calls},
            {"comm_ms", comm_ms},
            {"exposed_comm_ms", exposed_comm_ms},
            {"hidden_comm_share", hidden_comm_share},
            {"peaks",
             {{"source", peaks.source},
              {"tensor_tflops", peaks.tensor_tflops},
              {"tf32_tflops", peaks.tf32_tflops},
              {"fp32_tflops", peaks.fp32_tflops},
              {"bandwidth_gb_s", peaks.bandwidth_gb_s}}},
            {"families", rows(families)},
            {"modules", rows(modules)},
            {"ops", rows(ops)},
            {"bandwidth_bound_share", bandwidth_bound_share},
            {"bandwidth_bound_roof_pct", bandwidth_bound_roof_pct},
            {"fuse_candidates", fuse_candidates},
            {"misaligned_gemm",
             {{"calls", misaligned_gemm_calls},
              {"ms", misaligned_gemm_ms},
              {"share", misaligned_gemm_share},
              {"example", misaligned_gemm_example}}}};
  return j.dump(2);
}

}  // namespace stoker::diag
