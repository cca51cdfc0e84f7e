#include "stoker/diag/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "diag/number_format.h"
#include "diag/op_profile.h"

namespace stoker::diag {

namespace {

using detail::fmt;

std::string pct(double share) { return fmt("%.1f %%", 100.0 * share); }
std::string ms(double v) { return fmt("%.2f ms", v); }

Level rate(double share, double moderate, double high) {
  return share >= high ? Level::high : share >= moderate ? Level::moderate : Level::none;
}

bool is_throttled(const GpuHealth& g, const Thresholds& t) {
  if (!g.available || g.busy_samples < 3 || g.sm_clock_mhz <= 0 || g.sm_clock_max_mhz <= 0)
    return false;
  return g.slowdown_share >= t.throttle_samples &&
         g.sm_clock_mhz < t.throttle_clock_ratio * g.sm_clock_max_mhz;
}

void input_advice(const Breakdown& b, const LoaderView& l, std::vector<std::string>& out) {
  const double demand = b.demand_samples_per_s;
  if (l.is_loader && l.capacity_samples_per_s > 0) {
    const int needed =
        static_cast<int>(std::ceil(demand * l.worker_s_per_sample * 1.25));  // Loader's kHeadroom
    std::string s = "loader delivers " + format_count(b.samples_per_s) + " samples/s (" +
                    std::to_string(l.threads) + (l.threads == 1 ? " thread" : " threads") +
                    ", capacity " + format_count(l.capacity_samples_per_s) + "/s at " +
                    fmt("%.2f", l.worker_s_per_sample * 1e3) +
                    " ms of thread time per sample: read " + fmt("%.2f", l.read_ms) + ", decode " +
                    fmt("%.2f", l.decode_ms) + ", resize " + fmt("%.2f", l.resize_ms) +
                    " ms), the model consumes " + format_count(demand) + ": ";
    if (l.threads < l.cpu_count && needed > l.threads) {
      s += "raise LoaderOptions::threads to " + std::to_string(std::min(needed, l.cpu_count)) +
           " (this machine has " + std::to_string(l.cpu_count) + " hardware threads" +
           (l.threads_fixed ? "" : "; or let it autotune with threads = 0, max_threads = 0") + ")";
      if (needed > l.cpu_count)
        s += ", and";
      else
        s += ", or";
      s += " pack smaller images (stoker pack --resize " +
           std::to_string(std::max<int64_t>(l.image_size > 0 ? l.image_size * 8 / 7 : 256, 64)) +
           ")";
    } else {
      s += "the decode threads are at this machine's capacity (" + std::to_string(l.cpu_count) +
           " hardware threads): pack smaller images (stoker pack --resize), train at a smaller "
           "output size, or cache decoded batches";
    }
    out.push_back(s);
    if (l.h2d_ms_per_batch > 0 && b.h2d_input_share > 0.10)
      out.push_back("host-to-device copies take " + ms(l.h2d_ms_per_batch) + " per batch (" +
                    pct(b.h2d_input_share) +
                    " of the input time): send u8 images (the Loader does), keep them pinned, and "
                    "check the PCIe link (stoker doctor)");
    if (l.threads >= 1 && l.prefetch <= 2)
      out.push_back("only " + std::to_string(l.prefetch) +
                    " batches are prepared ahead: raise LoaderOptions::prefetch so bursts of slow "
                    "samples are absorbed");
  } else {
    out.push_back("the data source (" + (l.kind.empty() ? std::string("BatchSource") : l.kind) +
                  ") delivers " + format_count(b.samples_per_s) +
                  " samples/s, the model consumes " + format_count(demand) +
                  ": prepare batches ahead of the step (data::Loader prefetches on its own "
                  "threads), keep the data on the device, or make next() cheaper");
  }
}

// What to do about one memory-bound op, by name (and its calls per step: a loss that runs
// several times per step is already the chunked head + loss). Empty: nothing specific.
std::string fusion_hint(const std::string& op, double calls) {
  const std::string f = op_family(op);
  if (f == "batch norm")
    return "fuse the ReLU after a batch norm into it (nn::BatchNorm2d::set_activation) and a "
           "residual block's tail relu(bn(x) + shortcut) into its last batch norm "
           "(nn::Residual::set_tail_relu; stoker_classifier --fuse-bn-relu)";
  if (f == "layer norm")
    return "fuse layer norm with the residual add (nn::LayerNorm::forward_add)";
  if (op == "bias_grad")
    return "bias gradients are a pass over each GEMM's output gradient: fewer, wider layers";
  if (f == "elementwise")
    return "fuse elementwise ops into the neighbouring GEMM's epilogue (bias + GELU: "
           "nn::Linear::set_activation) or one fused kernel";
  if (f == "optimizer")
    return "the optimizer reads and writes every parameter and its state once a step: bf16 or "
           "8-bit state (optim::StateFormat) halves or quarters those bytes";
  if (f == "loss" && calls > 1.5)
    return "the loss already runs a chunk of rows at a time: larger chunks "
           "(LinearCrossEntropyOptions::chunk_rows) mean fewer passes over the head's gradient, "
           "and class counts that are multiples of 64 keep its rows aligned";
  if (f == "loss")
    return "fuse the LM head and the cross-entropy, a chunk of rows at a time "
           "(nn::LinearCrossEntropyLoss)";
  return {};
}

// From the op table: which ops to fuse (bandwidth-bound ones, by time), and the GPU's idle time
// inside the step.
void op_advice(const OpTable& ops, Report& r) {
  const bool bandwidth = std::any_of(r.findings.begin(), r.findings.end(), [](const Finding& f) {
    return f.what == "bandwidth" && f.level != Level::none;
  });
  if (bandwidth && !ops.fuse_candidates.empty()) {
    std::string names;
    for (const std::string& n : ops.fuse_candidates) {
      const auto row =
          std::find_if(ops.ops.begin(), ops.ops.end(), [&](const OpRow& o) { return o.key == n; });
      names += (names.empty() ? "" : ", ") + n;
      if (row != ops.ops.end())
        names +=
            " (" + ms(row->ms) + "/step, " + fmt("%.0f", row->bandwidth_pct) + " % of the roof)";
    }
    std::string how;
    for (const std::string& n : ops.fuse_candidates) {
      const auto row =
          std::find_if(ops.ops.begin(), ops.ops.end(), [&](const OpRow& o) { return o.key == n; });
      const std::string h = fusion_hint(n, row != ops.ops.end() ? row->calls : 0);
      if (!h.empty() && how.find(h) == std::string::npos) how += (how.empty() ? "" : "; ") + h;
    }
    r.advice.push_back("fuse these memory-bound ops: " + names +
                       ": each moves its tensors through memory once per op" +
                       (how.empty() ? std::string() : "; " + how));
  }
  if (ops.misaligned_gemm_share >= 0.05 && ops.device_timed)
    r.advice.push_back(
        "GEMMs with a dimension that is not a multiple of 16 bytes take " +
        pct(ops.misaligned_gemm_share) + " of the step (" + ms(ops.misaligned_gemm_ms) + ", " +
        fmt("%.0f", ops.misaligned_gemm_calls) + " calls; the slowest " +
        ops.misaligned_gemm_example +
        "): tensor cores need whole 16-byte rows, cuBLASLt falls back to slower kernels; pad that "
        "dimension — a vocabulary to a multiple of 64 (GPT-2's 50,257 to 50,304), widths and "
        "batch x tokens to multiples of 8");
  if (ops.idle_share >= 0.10 && ops.device_timed)
    r.advice.push_back("the GPU is idle " + pct(ops.idle_share) + " of the step between ops (" +
                       ms(ops.idle_ms) + " of " + ms(ops.step_ms) +
                       " in the op-timed steps): launch gaps or waits; fewer, larger kernels or "
                       "a CUDA graph close them");
  else if (ops.idle_share >= 0.10)  // the CPU: the host clock between ops is the framework's
    r.advice.push_back("the training thread spends " + pct(ops.idle_share) +
                       " of the step between ops (" + ms(ops.idle_ms) + " of " + ms(ops.step_ms) +
                       " in the op-timed steps): bookkeeping around small ops; larger batches "
                       "or layers amortize it");
}

}  // namespace

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::compute_bound:
      return "compute-bound";
    case Verdict::input_bound:
      return "input-bound";
    case Verdict::launch_bound:
      return "launch-bound";
    case Verdict::communication_bound:
      return "communication-bound";
    case Verdict::throttled:
      return "throttled";
    case Verdict::bandwidth_bound:
      return "bandwidth-bound";
    case Verdict::misaligned_gemms:
      return "misaligned-GEMMs";
  }
  return "?";
}

const char* level_name(Level l) {
  return l == Level::high ? "high" : l == Level::moderate ? "moderate" : "none";
}

std::string format_count(double v) {
  if (!std::isfinite(v)) return "?";
  const long long n = std::llround(v);
  const std::string digits = std::to_string(n < 0 ? -n : n);
  std::string s = n < 0 ? "-" : "";
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
    s += digits[i];
  }
  return s;
}

Report make_report(const Breakdown& b, const LoaderView& loader, const GpuHealth& gpu,
                   const Thresholds& t, const OpTable& ops) {
  Report r;
  r.breakdown = b;
  r.loader = loader;
  r.gpu = gpu;
  r.ops = ops;
  r.title = "steps " + std::to_string(b.first_step) + ".." + std::to_string(b.last_step);
  if (b.steps == 0) {
    r.headline = "no timed steps in this window";
    return r;
  }
  // Findings in the order of how certain each is (input, launch, communication, then the op
  // table's bandwidth and GEMM alignment, which rest on FLOP and byte counts and datasheet
  // roofs); the order only breaks ties.
  r.findings = {
      {"input", b.input_share, rate(b.input_share, t.input_moderate, t.input_high)},
      {"launch", b.launch_share, rate(b.launch_share, t.launch_moderate, t.launch_high)},
      {"communication", b.comm_share, rate(b.comm_share, t.comm_moderate, t.comm_high)},
  };
  if (!ops.empty() && ops.peaks.known())
    r.findings.push_back({"bandwidth", ops.bandwidth_bound_share,
                          rate(ops.bandwidth_bound_share, t.bandwidth_moderate, t.bandwidth_high)});
  if (!ops.empty() && ops.device_timed)
    r.findings.push_back(
        {"misaligned GEMMs", ops.misaligned_gemm_share,
         rate(ops.misaligned_gemm_share, t.misaligned_moderate, t.misaligned_high)});
  auto verdict_of = [](const std::string& what) {
    return what == "input"              ? Verdict::input_bound
           : what == "launch"           ? Verdict::launch_bound
           : what == "communication"    ? Verdict::communication_bound
           : what == "misaligned GEMMs" ? Verdict::misaligned_gemms
                                        : Verdict::bandwidth_bound;
  };
  // The headline is the largest finding by share of the step among those of the strongest
  // level: a 49 % of misaligned GEMMs heads the report over 15 % of bandwidth-bound ops.
  const auto pick = [&](Level want) -> const Finding* {
    const Finding* best = nullptr;
    for (const Finding& f : r.findings)
      if (f.level == want && (!best || f.share > best->share)) best = &f;
    return best;
  };
  const Finding* best = pick(Level::high);
  if (!best && is_throttled(gpu, t)) {
    r.verdict = Verdict::throttled;
    r.level = gpu.sm_clock_mhz < 0.75 * gpu.sm_clock_max_mhz ? Level::high : Level::moderate;
  } else {
    if (!best) best = pick(Level::moderate);
    if (best) {
      r.verdict = verdict_of(best->what);
      r.level = best->level;
    }
  }

  switch (r.verdict) {
    case Verdict::input_bound:
      r.headline = std::string("input-bound (") + level_name(r.level) + "): " + pct(b.input_share) +
                   " of the step waits for data" +
                   (b.device_timed ? " (device idle until the batch is ready)" : "");
      input_advice(b, loader, r.advice);
      break;
    case Verdict::launch_bound:
      r.headline = std::string("launch-bound (") + level_name(r.level) + "): in " +
                   pct(b.launch_share) +
                   " of the step the GPU finished its work as soon as the host launched it";
      r.advice.push_back(
          "the host, not the GPU, sets the pace (" + ms(b.launch.median_ms) + " host-paced of " +
          ms(b.step.median_ms) +
          " per step): raise the batch size (more work per launch), capture the step in a CUDA "
          "graph (TrainerOptions::cuda_graph; --cuda-graph in the example trainers), or use "
          "fewer, larger layers");
      if (b.max_host_syncs > 0)
        r.advice.push_back("each step makes up to " + std::to_string(b.max_host_syncs) +
                           " host syncs: remove item()/to(cpu) calls from the step");
      break;
    case Verdict::communication_bound:
      r.headline = std::string("communication-bound (") + level_name(r.level) +
                   "): " + pct(b.comm_share) + " of the step waits for gradient all-reduces (" +
                   ms(b.device_timed ? b.device[static_cast<int>(Phase::comm)].median_ms
                                     : b.host[static_cast<int>(Phase::comm)].median_ms) +
                   " exposed per step)";
      r.advice.push_back(
          "hide more of the all-reduce behind backward: smaller first bucket and buckets "
          "(GradSyncOptions::first_bucket_bytes, bucket_bytes) start it earlier; bf16 "
          "compression halves the bytes; more micro-batches per step (grad_accum_steps) "
          "communicate less often; compare busbw with stoker_allreduce_throughput");
      break;
    case Verdict::throttled:
      r.headline = std::string("throttled (") + level_name(r.level) + "): SM clock " +
                   format_count(gpu.sm_clock_mhz) + " of " + format_count(gpu.sm_clock_max_mhz) +
                   " MHz with slowdown reasons in " + pct(gpu.slowdown_share) + " of busy samples";
      r.advice.push_back(
          "the GPU runs below its clocks (power cap " + pct(gpu.power_cap_share) + ", thermal " +
          pct(gpu.thermal_share) + ", hardware slowdown " + pct(gpu.hw_slowdown_share) +
          " of busy samples): a power cap is expected for dense GEMMs at the board's limit; "
          "thermal or hardware slowdown points at cooling or power delivery "
          "(nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE)");
      break;
    case Verdict::bandwidth_bound:
      r.headline = std::string("bandwidth-bound (") + level_name(r.level) +
                   "): " + pct(ops.bandwidth_bound_share) +
                   " of the step is in memory-bound ops at " +
                   fmt("%.0f", ops.bandwidth_bound_roof_pct) +
                   " % of the memory bandwidth roof (far from the compute roof)";
      break;
    case Verdict::misaligned_gemms:
      r.headline =
          std::string("misaligned GEMMs (") + level_name(r.level) +
          "): " + pct(ops.misaligned_gemm_share) + " of the step is in GEMMs with a dimension " +
          "that is not a multiple of 16 bytes (the slowest " + ops.misaligned_gemm_example + ")";
      break;
    case Verdict::compute_bound:
      r.headline = "compute-bound: " + pct(b.compute_share) + " of the step is " +
                   (b.device_timed ? "device work" : "computation on the training thread") +
                   " (input " + pct(b.input_share) + ", launch " + pct(b.launch_share) +
                   ", exposed communication " + pct(b.comm_share) + ")";
      r.advice.push_back(
          b.device_timed
              ? "the GPU is the limit: mixed precision (TrainerOptions::precision = bf16) if "
                "the run is fp32, a larger batch if memory allows; check MFU"
              : "the CPU arithmetic is the limit: train on a GPU, or reduce the model");
      break;
  }
  // Moderate findings besides the verdict still deserve a line.
  for (const Finding& f : r.findings) {
    if (f.level == Level::none || verdict_of(f.what) == r.verdict) continue;
    if (f.what == "misaligned GEMMs") continue;  // op_advice gives it its own line
    r.advice.push_back("also " + f.what + (f.what == "bandwidth" ? "-bound ops" : "") + ": " +
                       pct(f.share) + " of the step (" + level_name(f.level) + ")");
  }
  if (!ops.empty()) op_advice(ops, r);
  return r;
}

std::string Report::text() const {
  const Breakdown& b = breakdown;
  std::string s;
  char buf[256];
  auto line = [&](const std::string& l) { s += "diag  " + l + "\n"; };
  line("== " + title + " (" + std::to_string(b.steps) + " steps, " + device + ") ==");
  line("verdict: " + headline);
  if (b.steps == 0) return s + curves.text();
  std::snprintf(buf, sizeof buf,
                "step %.2f ms median, %.2f ms p90 (host); %s samples/s; data wait %.1f %% "
                "(host); host syncs/step %.2f (max %lld)",
                b.step.median_ms, b.step.p90_ms, format_count(b.samples_per_s).c_str(),
                100 * b.host_data_share, b.mean_host_syncs,
                static_cast<long long>(b.max_host_syncs));
  line(buf);
  if (b.device_timed)
    line("phase          host median    p90   device median    p90");
  else
    line("phase          host median    p90");
  for (int p = 0; p < kPhaseCount; ++p) {
    if (b.device_timed)
      std::snprintf(buf, sizeof buf, "  %-10s %10.3f %8.3f %12.3f %8.3f  ms",
                    phase_name(static_cast<Phase>(p)), b.host[p].median_ms, b.host[p].p90_ms,
                    b.device[p].median_ms, b.device[p].p90_ms);
    else
      std::snprintf(buf, sizeof buf, "  %-10s %10.3f %8.3f  ms", phase_name(static_cast<Phase>(p)),
                    b.host[p].median_ms, b.host[p].p90_ms);
    line(buf);
  }
  std::snprintf(buf, sizeof buf, "  %-10s %10.3f %8.3f  ms", "other", b.other.median_ms,
                b.other.p90_ms);
  line(buf);
  if (b.launch_known) {
    std::snprintf(buf, sizeof buf, "  %-10s %10s %8s %12.3f %8.3f  ms (host-paced device time)",
                  "launch", "", "", b.launch.median_ms, b.launch.p90_ms);
    line(buf);
  }
  if (b.h2d_known) {
    std::snprintf(buf, sizeof buf, "  %-10s %10s %8s %12.3f %8.3f  ms (copy stream, overlapped)",
                  "h2d", "", "", b.h2d.median_ms, b.h2d.p90_ms);
    line(buf);
  }
  std::snprintf(buf, sizeof buf,
                "shares: input %.1f %%, launch %s, exposed comm %.1f %%, compute %.1f %%",
                100 * b.input_share,
                b.launch_known || !b.device_timed ? fmt("%.1f %%", 100 * b.launch_share).c_str()
                                                  : "unknown (no idle moment to calibrate)",
                100 * b.comm_share, 100 * b.compute_share);
  line(buf);
  if (loader.present) {
    if (loader.is_loader)
      line("loader: " + loader.summary + "; per sample (thread time): read " +
           fmt("%.3f", loader.read_ms) + ", decode " + fmt("%.3f", loader.decode_ms) + ", resize " +
           fmt("%.3f", loader.resize_ms) + " ms; capacity " +
           format_count(loader.capacity_samples_per_s) + " samples/s");
    else
      line("data: " + loader.kind);
  }
  if (device != "cpu") line("gpu: " + (gpu.name.empty() ? "" : gpu.name + ": ") + gpu.line());
  s += ops.text();
  for (const std::string& a : advice) line("advice: " + a);
  s += curves.text();
  if (timer_dropped > 0)
    line("note: " + std::to_string(timer_dropped) + " steps were not timed (device far behind)");
  return s;
}

std::string Report::json() const {
  using nlohmann::json;
  const Breakdown& b = breakdown;
  auto stat = [](const PhaseStat& p) {
    return json{{"median_ms", p.median_ms}, {"p90_ms", p.p90_ms}, {"mean_ms", p.mean_ms}};
  };
  json phases = json::object();
  for (int p = 0; p < kPhaseCount; ++p) {
    json j = {{"host", stat(b.host[p])}};
    if (b.device_timed) j["device"] = stat(b.device[p]);
    phases[phase_name(static_cast<Phase>(p))] = j;
  }
  json found = json::array();
  for (const Finding& f : findings)
    found.push_back({{"what", f.what}, {"share", f.share}, {"level", level_name(f.level)}});
  json j = {
      {"title", title},
      {"device", device},
      {"verdict", verdict_name(verdict)},
      {"level", level_name(level)},
      {"headline", headline},
      {"advice", advice},
      {"findings", found},
      {"steps", b.steps},
      {"first_step", b.first_step},
      {"last_step", b.last_step},
      {"device_timed", b.device_timed},
      {"step", stat(b.step)},
      {"phases", phases},
      {"other", stat(b.other)},
      {"launch", b.launch_known ? stat(b.launch) : json(nullptr)},
      {"h2d", b.h2d_known ? stat(b.h2d) : json(nullptr)},
      {"shares",
       {{"input", b.input_share},
        {"launch", b.launch_share},
        {"comm", b.comm_share},
        {"compute", b.compute_share},
        {"host_data", b.host_data_share}}},
      {"host_syncs_per_step", {{"mean", b.mean_host_syncs}, {"max", b.max_host_syncs}}},
      {"samples", b.samples},
      {"samples_per_s", b.samples_per_s},
      {"demand_samples_per_s", b.demand_samples_per_s},
  };
  if (loader.present)
    j["loader"] = {{"kind", loader.kind},
                   {"threads", loader.threads},
                   {"max_threads", loader.max_threads},
                   {"prefetch", loader.prefetch},
                   {"cpu_count", loader.cpu_count},
                   {"worker_s_per_sample", loader.worker_s_per_sample},
                   {"read_ms", loader.read_ms},
                   {"decode_ms", loader.decode_ms},
                   {"resize_ms", loader.resize_ms},
                   {"capacity_samples_per_s", loader.capacity_samples_per_s},
                   {"h2d_ms_per_batch", loader.h2d_ms_per_batch}};
  j["gpu"] = {{"available", gpu.available},
              {"status", gpu.status},
              {"name", gpu.name},
              {"samples", gpu.samples},
              {"sm_clock_mhz", gpu.sm_clock_mhz},
              {"sm_clock_max_mhz", gpu.sm_clock_max_mhz},
              {"mem_clock_mhz", gpu.mem_clock_mhz},
              {"mem_clock_max_mhz", gpu.mem_clock_max_mhz},
              {"power_w", gpu.power_w},
              {"power_limit_w", gpu.power_limit_w},
              {"temperature_c", gpu.temperature_c},
              {"util_gpu", gpu.util_gpu},
              {"pcie_tx_mb_s", gpu.pcie_tx_mb_s},
              {"pcie_rx_mb_s", gpu.pcie_rx_mb_s},
              {"slowdown_share", gpu.slowdown_share},
              {"power_cap_share", gpu.power_cap_share},
              {"thermal_share", gpu.thermal_share}};
  if (!ops.empty()) j["ops"] = json::parse(ops.json());
  if (curves.sawtooth.samples > 0 || !curves.slowdown.segments.empty() || curves.evaluations > 0) {
    json segments = json::array();
    for (const TrendSegment& t : curves.slowdown.segments)
      segments.push_back({{"label", t.label},
                          {"first_step", t.first_step},
                          {"last_step", t.last_step},
                          {"steps", t.steps},
                          {"step_ms", t.step_ms},
                          {"data_wait_ms", t.data_wait_ms}});
    json cf = json::array();
    for (const CurveFinding& f : curves.findings)
      cf.push_back({{"what", f.what},
                    {"level", level_name(f.level)},
                    {"value", f.value},
                    {"evidence", f.evidence},
                    {"advice", f.advice}});
    j["curves"] = {
        {"sawtooth",
         {{"source", curves.sawtooth.source},
          {"samples", curves.sawtooth.samples},
          {"mean_util", curves.sawtooth.mean_util},
          {"low_share", curves.sawtooth.low_share},
          {"cycles", curves.sawtooth.cycles},
          {"period_s", curves.sawtooth.period_s}}},
        {"trend",
         {{"by_epoch", curves.slowdown.by_epoch},
          {"segments", segments},
          {"step_rise", curves.slowdown.step_rise},
          {"data_rise", curves.slowdown.data_rise},
          {"first_slow", curves.slowdown.first_slow >= 0
                             ? json(curves.slowdown.segments[curves.slowdown.first_slow].label)
                             : json(nullptr)}}},
        {"evaluation",
         {{"count", curves.evaluations},
          {"seconds", curves.eval_s},
          {"wall_s", curves.wall_s},
          {"share", curves.eval_share}}},
        {"findings", cf}};
  }
  return j.dump(2);
}

}  // namespace stoker::diag
