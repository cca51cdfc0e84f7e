#include "diag/diagnostics.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <thread>

#include "diag/breakdown.h"
#include "diag/doctor.h"
#include "diag/nvtx.h"
#include "diag/op_timer.h"
#include "stoker/core/error.h"
#include "stoker/core/output_path.h"
#include "stoker/core/stream.h"
#include "stoker/data/batch_source.h"
#include "util/atomic_file.h"

namespace stoker::diag {

namespace {
constexpr size_t kMaxRunSteps = 200000;  // the baseline card keeps the latest ones beyond this
// Trace tracks.
constexpr int kHostPid = 1, kDevicePid = 2, kLoaderPid = 3, kGpuPid = 4;
constexpr int kOpsTid = 2, kCommTid = 3;  // op-timed steps' tracks (device, or host on the CPU)
}  // namespace

struct Diagnostics::LoaderSnapshot {
  bool valid = false;
  data::LoaderCounters c;
  double time_ms = 0;
};

Diagnostics::Diagnostics(DiagnosticsOptions options, Device device)
    : options_(std::move(options)),
      device_(device),
      timer_(device, options_.device_timing, options_.thresholds) {
  // Op timing needs device events on a GPU: not with host clocks only.
  if (options_.op_timing_interval > 0 && (device_.is_cpu() || options_.device_timing)) {
    op_timer_ = std::make_unique<OpTimer>(device_);
    peaks_ = device_peaks(device_);
  }
  if (options_.monitor && device_.is_cuda()) {
    GpuMonitorOptions mo;
    mo.interval_s = options_.monitor_interval_s;
    mo.library = options_.nvml_library;
    mo.pcie = options_.monitor_pcie;
    monitor_ = std::make_unique<GpuMonitor>(device_, mo);
  }
  if (!options_.trace_path.empty()) {
    trace_ = std::make_unique<TraceWriter>();
    trace_->process_name(kHostPid, "host");
    trace_->thread_name(kHostPid, 1, "training thread");
    if (device_.is_cuda()) {
      trace_->process_name(kDevicePid, "GPU " + device_.str());
      trace_->thread_name(kDevicePid, 1, "compute stream");
    }
    if (op_timer_) {
      const int pid = device_.is_cuda() ? kDevicePid : kHostPid;
      trace_->thread_name(pid, kOpsTid, "ops (op-timed steps)");
      trace_->thread_name(pid, kCommTid, "grad sync buckets (op-timed steps)");
    }
    trace_->process_name(kLoaderPid, "data loader");
    if (monitor_ && monitor_->available()) trace_->process_name(kGpuPid, "GPU monitor (NVML)");
  }
}

Diagnostics::~Diagnostics() {
  if (op_timer_) op_timer_->cancel();
  while (nvtx_depth_ > 0) {
    nvtx_pop();
    --nvtx_depth_;
  }
}

Diagnostics::LoaderSnapshot Diagnostics::snapshot() const {
  LoaderSnapshot s;
  s.time_ms = now_ms();
  if (const data::InputPipeline* p = source_ ? source_->pipeline() : nullptr) {
    s.valid = true;
    s.c = p->counters();
  }
  return s;
}

void Diagnostics::begin_fit(const data::BatchSource& source, int64_t first_step,
                            std::map<std::string, std::string> config, bool print, bool main_rank) {
  source_ = &source;
  main_rank_ = main_rank;
  // end_fit() writes these files (rank 0) and reads the card to compare with: checked now, so
  // that a bad path fails before the first step instead of after the whole run.
  if (main_rank_) {
    if (!options_.trace_path.empty())
      core::check_output_path(options_.trace_path,
                              "DiagnosticsOptions::trace_path (STOKER_DIAG_TRACE)");
    if (!options_.report_json.empty())
      core::check_output_path(options_.report_json,
                              "DiagnosticsOptions::report_json (STOKER_DIAG_REPORT_JSON)");
    if (!options_.baseline_save.empty())
      core::check_output_path(options_.baseline_save,
                              "DiagnosticsOptions::baseline_save (STOKER_DIAG_BASELINE_SAVE)");
    if (!options_.timeline_csv.empty())
      core::check_output_path(options_.timeline_csv,
                              "DiagnosticsOptions::timeline_csv (STOKER_DIAG_TIMELINE_CSV)");
    if (!options_.gpu_csv.empty())
      core::check_output_path(options_.gpu_csv,
                              "DiagnosticsOptions::gpu_csv (STOKER_DIAG_GPU_CSV)");
    if (!options_.html_report.empty())
      core::check_output_path(options_.html_report,
                              "DiagnosticsOptions::html_report (STOKER_DIAG_HTML)");
    std::error_code ec;
    STOKER_CHECK_HINT(options_.baseline_compare.empty() ||
                          std::filesystem::is_regular_file(options_.baseline_compare, ec),
                      "save a card first with DiagnosticsOptions::baseline_save "
                      "(STOKER_DIAG_BASELINE_SAVE)",
                      "DiagnosticsOptions::baseline_compare (STOKER_DIAG_BASELINE_COMPARE) ",
                      options_.baseline_compare.string(), ": no such file");
  }
  config_ = std::move(config);
  print_ = print && options_.print;
  first_timed_step_ = first_step + std::max<int64_t>(0, options_.warmup_steps);
  window_.clear();
  run_.clear();
  window_start_.reset();
  run_start_.reset();
  trace_prev_.reset();
  traced_steps_ = 0;
  comparison_.reset();
  (void)timer_.completed();  // steps of an earlier fit
  window_ops_.clear();
  run_ops_.clear();
  step_starts_.clear();
  if (op_timer_) (void)op_timer_->completed();
  fit_start_ms_ = now_ms();
  epoch_starts_.clear();
  pending_loss_.clear();
  timeline_.clear();
  gpu_curve_.clear();
  gpu_curve_last_ms_ = fit_start_ms_;
  evals_.clear();
}

void Diagnostics::begin_epoch(int64_t epoch) {
  // Keyed by -1 until the epoch's first step begins (begin_step moves it to that step).
  epoch_starts_[-1] = epoch;
}

void Diagnostics::record_loss(int64_t steps_done, double loss) {
  if (!timeline_.empty() && timeline_.back().step == steps_done) {
    timeline_.back().loss = loss;
    return;
  }
  if (pending_loss_.size() >= 4096) pending_loss_.erase(pending_loss_.begin());
  pending_loss_[steps_done] = loss;
}

void Diagnostics::record_eval(int64_t steps_done, double seconds) {
  const double end = now_ms();
  evals_.push_back({steps_done, (end - fit_start_ms_) / 1e3, seconds});
  if (trace_ && traced_steps_ < options_.trace_max_steps)
    trace_->complete("evaluation", "evaluation", kHostPid, 1, end - seconds * 1e3, seconds * 1e3,
                     {{"step", static_cast<double>(steps_done)}});
}

void Diagnostics::begin_step(int64_t step) {
  if (step == first_timed_step_ || (!window_start_ && step > first_timed_step_)) {
    window_start_ = std::make_unique<LoaderSnapshot>(snapshot());
    run_start_ = std::make_unique<LoaderSnapshot>(*window_start_);
    window_start_ms_ = run_start_ms_ = window_start_->time_ms;
  }
  if (const auto e = epoch_starts_.find(-1); e != epoch_starts_.end()) {
    epoch_starts_[step] = e->second;
    epoch_starts_.erase(e);
  }
  timer_.begin_step(step);
  if (op_timer_ && step >= first_timed_step_ &&
      (step - first_timed_step_) % options_.op_timing_interval == 0)
    op_timer_->start(step);
  else if (op_timer_)
    op_timer_->cancel();  // a step that threw halfway
  if (options_.nvtx) {
    while (nvtx_depth_ > 0) {  // a step that threw halfway
      nvtx_pop();
      --nvtx_depth_;
    }
    nvtx_push("step");
    nvtx_push(phase_name(Phase::data));
    nvtx_depth_ = 2;
  }
}

void Diagnostics::begin(Phase p) {
  if (!timer_.in_step()) return;
  timer_.begin(p);
  if (options_.nvtx && nvtx_depth_ == 2) {
    nvtx_pop();
    nvtx_push(phase_name(p));
  }
}

void Diagnostics::end_step(int64_t samples) {
  if (!timer_.in_step()) return;
  timer_.end_step(samples);
  if (op_timer_) op_timer_->stop();
  if (options_.nvtx) {
    while (nvtx_depth_ > 0) {
      nvtx_pop();
      --nvtx_depth_;
    }
  }
  // Loader stages as counter tracks: busy threads per stage since the previous step.
  if (trace_ && source_ && source_->pipeline() && traced_steps_ < options_.trace_max_steps &&
      window_start_) {
    LoaderSnapshot now = snapshot();
    if (trace_prev_ && now.valid && now.time_ms > trace_prev_->time_ms) {
      const double dt_s = (now.time_ms - trace_prev_->time_ms) / 1e3;
      const data::LoaderCounters &a = trace_prev_->c, &b = now.c;
      trace_->counter(
          "loader busy threads", kLoaderPid, now.time_ms,
          {{"read", (b.read_s - a.read_s) / dt_s},
           {"header", (b.header_s - a.header_s) / dt_s},
           {"decode", (b.decode_s - a.decode_s) / dt_s},
           {"resize", (b.resize_s - a.resize_s) / dt_s},
           {"other", std::max(0.0, ((b.worker_s - a.worker_s) - (b.read_s - a.read_s) -
                                    (b.header_s - a.header_s) - (b.decode_s - a.decode_s) -
                                    (b.resize_s - a.resize_s)) /
                                       dt_s)}});
      trace_->counter("loader samples/s", kLoaderPid, now.time_ms,
                      {{"decoded", (b.samples_decoded - a.samples_decoded) / dt_s},
                       {"delivered", (b.samples - a.samples) / dt_s}});
      const data::InputPipeline* l = source_->pipeline();
      const data::LoaderTuning t = l->tuning();
      trace_->counter("loader tuning", kLoaderPid, now.time_ms,
                      {{"threads", t.threads},
                       {"prefetch", t.prefetch},
                       {"ready batches", static_cast<double>(l->ready_batches())}});
    }
    trace_prev_ = std::make_unique<LoaderSnapshot>(now);
  }
  // Keep the device queue of unread steps short without waiting: poll now and then.
  if (timer_.pending() >= 64) collect();
}

void Diagnostics::cancel_step() {
  timer_.cancel_step();
  if (op_timer_) op_timer_->cancel();
  while (options_.nvtx && nvtx_depth_ > 0) {
    nvtx_pop();
    --nvtx_depth_;
  }
}

void Diagnostics::trace_step(const StepSample& s) {
  if (!trace_ || traced_steps_ >= options_.trace_max_steps) return;
  ++traced_steps_;
  const auto& m = s.marks;
  if (m.empty()) return;
  if (trace_first_ms_ < 0) trace_first_ms_ = m.front().host_ms;
  // Where its ops go on the time line, if it was op-timed.
  const double start = s.has_device && m.front().device_ms >= 0 ? m.front().device_ms
                       : s.has_device                           ? -1
                                                                : m.front().host_ms;
  if (start >= 0) {
    if (step_starts_.size() >= 64) step_starts_.erase(step_starts_.begin());
    step_starts_[s.step] = start;
  }
  trace_last_ms_ = m.back().host_ms;
  trace_->complete("step " + std::to_string(s.step), "step", kHostPid, 1, m.front().host_ms,
                   s.host_ms,
                   {{"step", static_cast<double>(s.step)},
                    {"samples", static_cast<double>(s.samples)},
                    {"host_syncs", static_cast<double>(s.host_syncs)}});
  for (size_t i = 0; i + 1 < m.size(); ++i)
    trace_->complete(phase_name(m[i].phase), "phase", kHostPid, 1, m[i].host_ms,
                     m[i + 1].host_ms - m[i].host_ms);
  if (s.has_device && m.front().device_ms >= 0) {
    trace_->complete("step " + std::to_string(s.step), "step", kDevicePid, 1, m.front().device_ms,
                     m.back().device_ms - m.front().device_ms, {{"launch_ms", s.launch_ms}});
    for (size_t i = 0; i + 1 < m.size(); ++i)
      trace_->complete(phase_name(m[i].phase), "phase", kDevicePid, 1, m[i].device_ms,
                       m[i + 1].device_ms - m[i].device_ms,
                       {{"lag_ms", m[i + 1].device_ms - m[i + 1].host_ms}});
  }
}

void Diagnostics::trace_ops(const OpStep& s) {
  const auto at = step_starts_.find(s.step);
  if (!trace_ || at == step_starts_.end()) return;
  const int pid = device_.is_cuda() ? kDevicePid : kHostPid;
  int bucket = 0;
  for (const OpRecord& r : s.ops) {
    const bool comm = r.name == core::kGradSyncBucketOp;
    trace_->complete(comm ? "all-reduce bucket " + std::to_string(bucket++) : r.name,
                     comm ? "communication" : op_family(r.name), pid, comm ? kCommTid : kOpsTid,
                     at->second + r.start_ms, r.ms,
                     {{"gflop", r.cost.flops * 1e-9}, {"mbytes", r.cost.bytes * 1e-6}});
  }
}

void Diagnostics::collect() {
  for (StepSample& s : timer_.completed()) {
    if (s.step < first_timed_step_) continue;
    trace_step(s);
    add_timeline_point(s);
    if (run_.size() >= kMaxRunSteps) run_.erase(run_.begin(), run_.begin() + kMaxRunSteps / 10);
    run_.push_back(s);
    run_.back().marks.clear();  // the card needs the spans only
    window_.push_back(std::move(s));
  }
  if (monitor_ && monitor_->available()) {
    for (const GpuSample& g : monitor_->samples(gpu_curve_last_ms_))
      if (g.time_ms > gpu_curve_last_ms_ || gpu_curve_.empty()) {
        gpu_curve_.push(g);
        gpu_curve_last_ms_ = g.time_ms;
      }
  }
  if (!op_timer_) return;
  for (OpStep& s : op_timer_->completed()) {
    trace_ops(s);
    if (run_ops_.size() >= kMaxRunOpSteps) run_ops_.erase(run_ops_.begin());
    run_ops_.push_back(s);
    window_ops_.push_back(std::move(s));
  }
}

void Diagnostics::add_timeline_point(const StepSample& s) {
  TimelinePoint p;
  p.step = s.step + 1;  // steps done, as the log counts them
  const auto e = epoch_starts_.upper_bound(s.step);
  p.epoch = e == epoch_starts_.begin() ? 0 : std::prev(e)->second;
  p.time_s = s.marks.empty() ? 0 : (s.marks.back().host_ms - fit_start_ms_) / 1e3;
  p.step_ms = s.host_ms;
  p.data_wait_ms = s.host[static_cast<int>(Phase::data)];
  if (s.has_device) {
    p.device_ms = 0;
    for (double d : s.device) p.device_ms += d;
  }
  p.samples = s.samples;
  if (const auto l = pending_loss_.find(p.step); l != pending_loss_.end()) {
    p.loss = l->second;
    pending_loss_.erase(pending_loss_.begin(), std::next(l));
  }
  timeline_.push(p);
}

CurveAnalysis Diagnostics::analyze_curves() const {
  return diag::analyze_curves(timeline_.items(), gpu_curve_.items(), evals_,
                              (now_ms() - fit_start_ms_) / 1e3, options_.thresholds);
}

bool Diagnostics::report_due(int64_t steps_done) const {
  return options_.report_interval > 0 && steps_done % options_.report_interval == 0;
}

LoaderView Diagnostics::loader_view(const LoaderSnapshot& from, const LoaderSnapshot& to) const {
  LoaderView v;
  v.present = source_ != nullptr;
  v.cpu_count = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const data::InputPipeline* l = source_ ? source_->pipeline() : nullptr;
  v.kind = source_ ? source_->kind() : "BatchSource";
  if (!l) return v;
  v.is_loader = true;
  const data::LoaderTuning t = l->tuning();
  v.threads = t.threads;
  v.prefetch = t.prefetch;
  v.max_threads = l->max_threads();
  v.threads_fixed = l->threads_fixed();
  v.image_size = l->output_size();
  v.summary = l->summary();
  if (!from.valid || !to.valid) return v;
  const data::LoaderCounters &a = from.c, &b = to.c;
  v.samples_decoded = b.samples_decoded - a.samples_decoded;
  const double n = static_cast<double>(std::max<int64_t>(1, v.samples_decoded));
  if (v.samples_decoded > 0) {
    v.worker_s_per_sample = (b.worker_s - a.worker_s) / n;
    v.read_ms = 1e3 * (b.read_s - a.read_s) / n;
    v.decode_ms = 1e3 * ((b.decode_s - a.decode_s) + (b.header_s - a.header_s)) / n;
    v.resize_ms = 1e3 * (b.resize_s - a.resize_s) / n;
    if (v.worker_s_per_sample > 0)
      v.capacity_samples_per_s = std::max(1, v.threads) / v.worker_s_per_sample;
  }
  const int64_t batches = b.batches - a.batches;
  if (device_.is_cuda() && batches > 0 && b.copy_device_s > a.copy_device_s)
    v.h2d_ms_per_batch = 1e3 * (b.copy_device_s - a.copy_device_s) / static_cast<double>(batches);
  return v;
}

Report Diagnostics::build(const std::vector<StepSample>& steps, const std::vector<OpStep>& ops,
                          const LoaderSnapshot& from, double since_ms, const std::string& title) {
  Breakdown b = summarize(steps);
  const LoaderView lv = loader_view(from, snapshot());
  if (lv.h2d_ms_per_batch >= 0 && b.steps > 0) {
    // The Loader times its copies on the copy stream: per step = per batch * micro-steps.
    double micro = 0;
    for (const StepSample& s : steps) micro += s.micro_steps;
    const double per_step = lv.h2d_ms_per_batch * micro / static_cast<double>(b.steps);
    b.h2d = {per_step, per_step, per_step};
    b.h2d_known = true;
    const double input = b.device_timed ? b.device[static_cast<int>(Phase::data)].mean_ms
                                        : b.host[static_cast<int>(Phase::data)].mean_ms;
    b.h2d_input_share = input > 0 ? std::min(1.0, per_step / input) : 0;
  }
  GpuHealth gpu;
  if (monitor_) {
    monitor_->sample_now();
    gpu = monitor_->health(since_ms);
  } else {
    gpu.status = device_.is_cuda() ? "monitor off" : "not a GPU run";
  }
  OpTable op_table =
      summarize_ops(ops, peaks_, /*tf32=*/false, options_.thresholds.near_bandwidth_roof);
  op_table.device_timed = device_.is_cuda();
  if (op_table.comm_calls > 0)
    op_table.set_exposed_comm(b.device_timed ? b.device[static_cast<int>(Phase::comm)].mean_ms
                                             : b.host[static_cast<int>(Phase::comm)].mean_ms);
  Report r = make_report(b, lv, gpu, options_.thresholds, op_table);
  r.title =
      title + " (steps " + std::to_string(b.first_step) + ".." + std::to_string(b.last_step) + ")";
  r.device = device_.str();
  r.timer_dropped = timer_.dropped();
  return r;
}

Report Diagnostics::report(const std::string& title, bool with_curves) {
  timer_.calibrate(/*settle=*/true);  // the log has just waited for the device: it is idle
  collect();
  const LoaderSnapshot from = window_start_ ? *window_start_ : LoaderSnapshot{};
  Report r = build(window_, window_ops_, from, window_start_ms_, title);
  if (with_curves) r.curves = analyze_curves();
  if (print_ && r.breakdown.steps > 0) {
    std::fputs(r.text().c_str(), stdout);
    std::fflush(stdout);
  }
  window_.clear();
  window_ops_.clear();
  if (window_start_) {
    *window_start_ = snapshot();
    window_start_ms_ = window_start_->time_ms;
  }
  return r;
}

Report Diagnostics::end_fit() {
  // Fit is over: one wait for the device so that every step's events can be read.
  if (device_.is_cuda() && (timer_.pending() > 0 || (op_timer_ && op_timer_->pending() > 0))) {
    core::synchronize_device(device_);
    timer_.calibrate(/*settle=*/true);
  }
  if (!window_.empty() || timer_.pending() > 0) {
    collect();
    if (!window_.empty()) report("end of fit", /*with_curves=*/true);
  }
  collect();  // the monitor's last samples
  const LoaderSnapshot from = run_start_ ? *run_start_ : LoaderSnapshot{};
  Report whole = build(run_, run_ops_, from, run_start_ms_, "whole fit");
  whole.curves = analyze_curves();
  if (trace_ && main_rank_) {
    if (monitor_ && monitor_->available() && trace_first_ms_ >= 0) {
      for (const GpuSample& s : monitor_->samples(trace_first_ms_)) {
        if (s.time_ms > trace_last_ms_ + 1000) break;
        trace_->counter("SM clock (MHz)", kGpuPid, s.time_ms,
                        {{"sm", s.sm_clock_mhz}, {"max", s.sm_clock_max_mhz}});
        trace_->counter("power (W)", kGpuPid, s.time_ms,
                        {{"draw", s.power_w}, {"limit", s.power_limit_w}});
        trace_->counter("temperature (C)", kGpuPid, s.time_ms, {{"gpu", s.temperature_c}});
        trace_->counter("utilization (%)", kGpuPid, s.time_ms,
                        {{"gpu", s.util_gpu}, {"memory", s.util_memory}});
        trace_->counter(
            "slowdown reasons", kGpuPid, s.time_ms,
            {{"bits", static_cast<double>(std::max<int64_t>(0, s.clock_events) &
                                          static_cast<int64_t>(clock_event::kSlowdown))}});
      }
    }
    trace_->write(options_.trace_path);
    if (print_)
      std::printf("diag  trace: %s (%zu events; open in ui.perfetto.dev)\n",
                  options_.trace_path.string().c_str(), trace_->size());
  }
  if (!options_.report_json.empty() && main_rank_) {
    const std::string text = whole.json() + "\n";
    const auto& path = options_.report_json;
    if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
    util::write_file_atomically(
        path, [&](int fd) { util::write_all(fd, text.data(), text.size(), path); });
  }
  if (main_rank_) write_curves();
  if ((!options_.baseline_save.empty() || !options_.baseline_compare.empty()) && !run_.empty() &&
      main_rank_) {
    const BaselineCard card =
        make_card(collect_environment(device_, config_), run_, verdict_name(whole.verdict));
    if (!options_.baseline_compare.empty()) {
      comparison_ = compare_cards(load_card(options_.baseline_compare), card);
      if (print_) std::fputs(comparison_->text().c_str(), stdout);
    }
    if (!options_.baseline_save.empty()) {
      save_card(options_.baseline_save, card);
      if (print_) std::printf("diag  baseline card: %s\n", options_.baseline_save.string().c_str());
    }
  }
  // The HTML report last: it shows the comparison with the baseline card.
  if (!options_.html_report.empty() && main_rank_) {
    write_html(options_.html_report,
               html(whole, static_checks(collect_static_inputs(options_.nvml_library))));
    if (print_) std::printf("diag  html report: %s\n", options_.html_report.string().c_str());
  }
  std::fflush(stdout);
  return whole;
}

void Diagnostics::write_curves() {
  auto write = [](const std::filesystem::path& path, const std::string& text) {
    if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
    util::write_file_atomically(
        path, [&](int fd) { util::write_all(fd, text.data(), text.size(), path); });
  };
  if (!options_.timeline_csv.empty()) {
    write(options_.timeline_csv, timeline_csv(timeline_.items()));
    if (print_)
      std::printf("diag  timeline: %s (%zu steps)\n", options_.timeline_csv.string().c_str(),
                  timeline_.items().size());
  }
  if (!options_.gpu_csv.empty()) {
    write(options_.gpu_csv, gpu_samples_csv(gpu_curve_.items(), fit_start_ms_));
    if (print_)
      std::printf("diag  gpu samples: %s (%zu samples%s)\n", options_.gpu_csv.string().c_str(),
                  gpu_curve_.items().size(),
                  monitor_ && monitor_->available() ? "" : "; no GPU monitor in this run");
  }
}

HtmlReport Diagnostics::html(const Report& whole, std::vector<Check> checks) const {
  HtmlReport h;
  const auto model = config_.find("model");
  h.title = "stoker health check" +
            (model != config_.end() ? ": " + model->second.substr(0, 80) : std::string());
  h.facts.emplace_back(
      "device",
      device_.str() + (whole.gpu.name.empty() ? std::string() : " (" + whole.gpu.name + ")"));
  for (const auto& [k, v] : config_)
    if (k != "model") h.facts.emplace_back(k, v);
  h.facts.emplace_back("steps", std::to_string(whole.breakdown.steps) + " timed (the first " +
                                    std::to_string(options_.warmup_steps) +
                                    " of the fit left out as warm-up)");
  h.report = whole;
  h.curves = whole.curves;
  h.timeline = timeline_.items();
  h.gpu = gpu_curve_.items();
  h.gpu_t0_ms = fit_start_ms_;
  h.evals = evals_;
  h.checks = std::move(checks);
  h.comparison = comparison_;
  return h;
}

}  // namespace stoker::diag
