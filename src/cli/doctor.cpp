// `stoker doctor`: the static checks (diag::static_checks on NVML's view of the machine plus a
// measured host-to-device bandwidth), then ablations that separate the causes of a slow step:
//
//   real vs synthetic data   the bundled model on the Loader over an LMDB (--data, or a
//                            synthetic set packed for the occasion), then the same Loader's
//                            first batch replayed (DiagnosticsOptions::synthetic_data)
//   batch-size sweep         the model alone (a batch held on the device) at several sizes
//   1 vs N GPUs              the model alone under `stoker launch` with 1 and N ranks
//                            (this program re-runs itself as the ranks: --worker-json)
//   --overhead               diagnostics off vs on, interleaved repetitions, same model
//
// With `-- PROGRAM ARGS...` the same ablations run the user's own Trainer-based program,
// steered through the STOKER_DIAG* variables (DiagnosticsOptions::apply_env); `{batch}` in
// its arguments is replaced by each size of the sweep.
#include "doctor.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "stoker/core/allocator.h"
#include "stoker/core/device.h"
#include "stoker/core/error.h"
#include "stoker/core/output_path.h"
#include "stoker/core/stream.h"
#include "stoker/core/tensor.h"
#include "stoker/core/version.h"
#include "stoker/data/loader.h"
#include "stoker/data/synth.h"
#include "stoker/diag/doctor.h"
#include "stoker/diag/gpu_info.h"
#include "stoker/dist/env.h"
#include "stoker/dist/grad_reducer.h"
#include "stoker/dist/launcher.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/batchnorm2d.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/conv2d.h"
#include "stoker/nn/linear.h"
#include "stoker/nn/loss.h"
#include "stoker/nn/pool.h"
#include "stoker/ops/random.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/trainer.h"

namespace stoker::cli {

namespace {

namespace fs = std::filesystem;
using diag::Measurement;
using nlohmann::json;

constexpr int kClasses = 8;

amp::Precision parse_precision(const std::string& p) {
  if (p == "fp32") return amp::Precision::fp32;
  if (p == "bf16") return amp::Precision::bf16;
  if (p == "fp16") return amp::Precision::fp16;
  STOKER_THROW("--precision ", p, ": use fp32, bf16 or fp16");
}

// --device, checked against the GPUs this process sees before any work.
Device parse_device_flag(const std::string& name) {
  if (name.empty()) return core::best_device();
  Device d;
  try {
    d = core::parse_device(name);
  } catch (const Error&) {
    STOKER_THROW("--device ", name, ": unknown device; use cpu, cuda or cuda:N");
  }
  const int visible = core::cuda_device_count();
  STOKER_CHECK_HINT(d.is_cpu() || d.index < visible,
                    "use --device cpu (or leave --device out: the best device is chosen)",
                    "--device ", name, ": ",
                    visible == 0 ? std::string("no CUDA device is visible")
                                 : core::detail::str("only ", visible, " CUDA device",
                                                     visible == 1 ? " is" : "s are", " visible"));
  return d;
}

// A batch held on the device, handed out `batches` times per epoch: the model without any
// input pipeline (the sweep, the ranks, the overhead runs).
class FixedBatches : public data::BatchSource {
 public:
  FixedBatches(data::Batch batch, int64_t batches) : batch_(std::move(batch)), n_(batches) {}
  void start_epoch(int64_t epoch) override {
    epoch_ = epoch;
    i_ = 0;
  }
  bool next(data::Batch& b) override {
    if (i_ >= n_) return false;
    ++i_;
    b = batch_;
    return true;
  }
  int64_t batches_per_epoch() const override { return n_; }
  int64_t samples_per_epoch() const override { return n_ * batch_.size; }
  int64_t epoch() const override { return epoch_; }
  int64_t batch_index() const override { return i_; }
  void restore(int64_t epoch, int64_t index) override {
    epoch_ = epoch;
    i_ = index;
  }

 private:
  data::Batch batch_;
  int64_t n_;
  int64_t epoch_ = -1, i_ = 0;
};

struct Setup {
  Device device;
  amp::Precision precision;
  int64_t width;
};

std::unique_ptr<nn::Sequential> make_model(const DoctorOptions& o, const Setup& s) {
  nn::manual_seed(1);
  auto m = std::make_unique<nn::Sequential>();
  if (o.model == "cnn") {
    m->add(nn::make<nn::Conv2d>(3, 64, 3, 1, 1));
    m->add(nn::make<nn::BatchNorm2d>(64));
    m->add(nn::make<nn::ReLU>());
    m->add(nn::make<nn::MaxPool2d>(2));
    m->add(nn::make<nn::Conv2d>(64, 128, 3, 1, 1));
    m->add(nn::make<nn::BatchNorm2d>(128));
    m->add(nn::make<nn::ReLU>());
    m->add(nn::make<nn::MaxPool2d>(2));
    m->add(nn::make<nn::Conv2d>(128, 256, 3, 1, 1));
    m->add(nn::make<nn::BatchNorm2d>(256));
    m->add(nn::make<nn::ReLU>());
    m->add(nn::make<nn::GlobalAvgPool>());
    m->add(nn::make<nn::Flatten>());
    m->add(nn::make<nn::Linear>(256, kClasses));
  } else {
    STOKER_CHECK(o.model == "mlp", "--model ", o.model, ": use mlp or cnn");
    m->add(nn::make<nn::Flatten>());
    int64_t in = 3 * int64_t{o.size} * o.size;
    for (int i = 0; i < o.layers; ++i) {
      m->add(nn::make<nn::Linear>(in, s.width));
      m->add(nn::make<nn::ReLU>());
      in = s.width;
    }
    m->add(nn::make<nn::Linear>(in, kClasses));
  }
  m->to(s.device);
  return m;
}

data::Batch random_batch(const DoctorOptions& o, const Setup& s, int64_t batch) {
  data::Batch b;
  b.input = Tensor::empty({batch, 3, o.size, o.size}, amp::compute_dtype(s.precision), s.device);
  ops::random_normal(b.input, 0.0f, 1.0f, 7, 0);
  std::vector<int64_t> labels(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) labels[static_cast<size_t>(i)] = i % kClasses;
  b.target = Tensor::from_vector(labels, {batch}, s.device);
  b.size = batch;
  return b;
}

Measurement to_measurement(const std::string& name, const std::string& kind, int64_t batch,
                           int ranks, const diag::Report& r) {
  Measurement m;
  m.name = name;
  m.kind = kind;
  m.batch = batch;
  m.ranks = ranks;
  m.samples_per_s = r.breakdown.samples_per_s * ranks;
  m.step_ms = r.breakdown.step.median_ms;
  m.verdict = diag::verdict_name(r.verdict);
  m.input_share = r.breakdown.input_share;
  m.launch_share = r.breakdown.launch_share;
  m.comm_share = r.breakdown.comm_share;
  m.headline = r.headline;
  return m;
}

// Trains the bundled model on `source` for warmup + steps optimizer steps with diagnostics on.
diag::Report train(const DoctorOptions& o, const Setup& s, data::BatchSource& source,
                   diag::DiagnosticsOptions d, dist::GradReducer* reducer = nullptr,
                   nn::Sequential* model_in = nullptr) {
  std::unique_ptr<nn::Sequential> owned;
  nn::Sequential* model = model_in;
  if (!model) {
    owned = make_model(o, s);
    model = owned.get();
  }
  optim::AdamW opt(model->named_parameters(), {.lr = 1e-4f});
  nn::CrossEntropyLoss loss;
  train::TrainerOptions t;
  t.precision = s.precision;
  t.log_interval = 1000000;
  t.progress_bar = false;
  t.max_steps = o.warmup + o.steps;
  t.quiet = true;
  t.reducer = reducer;
  d.enabled = true;
  d.warmup_steps = o.warmup;
  d.print = false;
  d.nvml_library = o.nvml;
  t.diagnostics = d;
  train::Trainer trainer(*model, loss, opt, t);
  const int64_t per_epoch = std::max<int64_t>(1, source.batches_per_epoch());
  const auto r = trainer.fit(source, (o.warmup + o.steps) / per_epoch + 2);
  return r.diagnosis;
}

// ---------------------------------------------------------------------------------------------
// Static checks.

double measure_h2d_gb_s(Device d) {
  const int64_t bytes = int64_t{256} << 20;
  Tensor host = Tensor::empty_pinned({bytes}, DType::u8);
  Tensor dev = Tensor::empty({bytes}, DType::u8, d);
  const Stream s = core::current_stream(d);
  std::vector<double> ms;
  for (int i = 0; i < 6; ++i) {
    Event a = Event::create(d, true), b = Event::create(d, true);
    a.record(s);
    core::detail::copy_bytes(dev, host);
    b.record(s);
    b.synchronize();
    if (i > 0) ms.push_back(Event::elapsed_ms(a, b));  // the first one warms up
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  return med > 0 ? static_cast<double>(bytes) / (med * 1e6) : -1;
}

json run_static(const DoctorOptions& o) {
  std::printf("== static checks ==\n");
  diag::StaticInputs in;
  in.gpus = diag::query_gpus(o.nvml);
  in.libraries = core::library_versions();
  in.built_with_cuda = core::built_with_cuda();
  in.cuda_devices = core::cuda_device_count();
  in.cpu_count = static_cast<int>(std::thread::hardware_concurrency());
  in.cpu = core::describe_device(Device::cpu());
  in.self_pid = static_cast<unsigned>(::getpid());
  in.h2d_gb_s.assign(in.gpus.gpus.size(), -1.0);
  for (int c = 0; c < in.cuda_devices; ++c) {
    double bw = -1;
    try {
      bw = measure_h2d_gb_s(Device::cuda(c));
    } catch (const std::exception& e) {
      std::printf("  [warn] cuda:%d: host-to-device bandwidth test failed: %s\n", c, e.what());
    }
    const std::string bus = diag::cuda_pci_bus_id(c);
    bool matched = false;
    for (size_t g = 0; g < in.gpus.gpus.size(); ++g) {
      if (!bus.empty() && diag::same_pci_device(bus, in.gpus.gpus[g].pci_bus_id)) {
        in.h2d_gb_s[g] = bw;
        matched = true;
      }
    }
    if (!matched && bw > 0)
      std::printf("  [ok]   cuda:%d: pinned host-to-device copies reach %.1f GB/s\n", c, bw);
  }
  json checks = json::array();
  for (const diag::Check& c : diag::static_checks(in)) {
    std::printf("  [%-4s] %s\n", diag::check_status_name(c.status), c.what.c_str());
    if (!c.fix.empty() &&
        (c.status == diag::CheckStatus::warn || c.status == diag::CheckStatus::fail))
      std::printf("         fix: %s\n", c.fix.c_str());
    checks.push_back(
        {{"status", diag::check_status_name(c.status)}, {"what", c.what}, {"fix", c.fix}});
  }
  std::fflush(stdout);
  return checks;
}

// ---------------------------------------------------------------------------------------------
// 1 vs N ranks: this program re-run as the ranks of `stoker launch`.

std::string self_exe() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("stoker") : p.string();
}

std::vector<std::string> worker_args(const DoctorOptions& o, const Setup& s, int64_t batch,
                                     const std::string& out) {
  return {"doctor",
          "--worker-json",
          out,
          "--model",
          o.model,
          "--width",
          std::to_string(s.width),
          "--layers",
          std::to_string(o.layers),
          "--precision",
          std::string(amp::precision_name(s.precision)),
          "--size",
          std::to_string(o.size),
          "--batch",
          std::to_string(batch),
          "--steps",
          std::to_string(o.steps),
          "--warmup",
          std::to_string(o.warmup),
          "--nvml",
          o.nvml,
          "--device",
          s.device.is_cuda() ? "cuda" : "cpu"};
}

Measurement run_ranks(const DoctorOptions& o, const Setup& s, int ranks, const fs::path& dir) {
  const std::string name =
      std::to_string(ranks) + (s.device.is_cuda() ? " GPU" : " rank") + (ranks > 1 ? "s" : "");
  const fs::path out = dir / ("ranks_" + std::to_string(ranks) + ".json");
  dist::LaunchOptions l;
  l.nproc_per_node = ranks;
  l.master_port = 0;
  l.program = self_exe();
  l.args = worker_args(o, s, o.batch, out.string());
  l.quiet = true;
  l.kill_grace_s = 5;
  const dist::LaunchResult r = dist::launch(l);
  Measurement m;
  m.name = name;
  m.kind = "ranks";
  m.batch = o.batch;
  m.ranks = ranks;
  if (r.exit_code != 0 || !fs::exists(out)) {
    m.failed = true;
    m.error = r.failure.empty() ? "no result" : r.failure;
    for (const auto& line : r.failed_stderr_tail) m.error += "\n    " + line;
    return m;
  }
  std::ifstream f(out);
  const json j = json::parse(f);
  m.samples_per_s = j.at("global_samples_per_s").get<double>();
  m.step_ms = j.at("step_ms").get<double>();
  m.verdict = j.at("verdict").get<std::string>();
  m.input_share = j.at("input_share").get<double>();
  m.launch_share = j.at("launch_share").get<double>();
  m.comm_share = j.at("comm_share").get<double>();
  m.headline = j.at("headline").get<std::string>();
  return m;
}

int run_worker(const DoctorOptions& o) {
  dist::DistContext ctx = dist::init_from_env();
  const Setup s{ctx.device, parse_precision(o.precision), o.width};
  auto model = make_model(o, s);
  dist::GradReducer reducer(*ctx.comm, *model);
  FixedBatches source(random_batch(o, s, o.batch), o.warmup + o.steps + 1);
  const diag::Report r = train(o, s, source, {}, &reducer, model.get());
  const Tensor rate = Tensor::from_floats({static_cast<float>(r.breakdown.samples_per_s)}, {1},
                                          DType::f32, ctx.comm->device());
  ctx.comm->all_reduce(rate, dist::ReduceOp::sum);
  const double global = rate.item();
  if (ctx.env.rank == 0) {
    const json j = {
        {"world_size", ctx.env.world_size},       {"global_samples_per_s", global},
        {"step_ms", r.breakdown.step.median_ms},  {"verdict", diag::verdict_name(r.verdict)},
        {"input_share", r.breakdown.input_share}, {"launch_share", r.breakdown.launch_share},
        {"comm_share", r.breakdown.comm_share},   {"headline", r.headline}};
    std::ofstream(o.worker_json) << j.dump(2) << "\n";
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// The user's own program, steered through STOKER_DIAG*.

Measurement run_program(const DoctorOptions& o, const std::string& name, const std::string& kind,
                        int64_t batch, int ranks, bool synthetic, const fs::path& dir) {
  static int counter = 0;
  const fs::path out = dir / ("program_" + std::to_string(counter++) + ".json");
  dist::LaunchOptions l;
  l.nproc_per_node = ranks;
  l.master_port = 0;
  l.quiet = true;
  l.program = o.program.front();
  for (size_t i = 1; i < o.program.size(); ++i) {
    std::string a = o.program[i];
    for (size_t p; (p = a.find("{batch}")) != std::string::npos;)
      a.replace(p, 7, std::to_string(batch));
    l.args.push_back(a);
  }
  l.extra_env = {{"STOKER_DIAG", "1"},
                 {"STOKER_DIAG_REPORT_JSON", out.string()},
                 {"STOKER_DIAG_MAX_STEPS", std::to_string(o.warmup + o.steps)},
                 {"STOKER_DIAG_WARMUP", std::to_string(o.warmup)},
                 {"STOKER_DIAG_SYNTHETIC", synthetic ? "1" : "0"}};
  const dist::LaunchResult r = dist::launch(l);
  Measurement m;
  m.name = name;
  m.kind = kind;
  m.batch = batch;
  m.ranks = ranks;
  if (r.exit_code != 0 || !fs::exists(out)) {
    m.failed = true;
    m.error = r.exit_code != 0 ? r.failure
                               : "the program wrote no report (does it train with the Trainer?)";
    return m;
  }
  std::ifstream f(out);
  const json j = json::parse(f);
  // Each rank writes its own report (the main rank's file stays): its samples/s times ranks.
  m.samples_per_s = j.at("samples_per_s").get<double>() * ranks;
  m.step_ms = j.at("step").at("median_ms").get<double>();
  m.verdict = j.at("verdict").get<std::string>();
  m.input_share = j.at("shares").at("input").get<double>();
  m.launch_share = j.at("shares").at("launch").get<double>();
  m.comm_share = j.at("shares").at("comm").get<double>();
  m.headline = j.at("headline").get<std::string>();
  return m;
}

// ---------------------------------------------------------------------------------------------
// Diagnostics overhead: the same model, diagnostics off and on, interleaved.

json run_overhead(const DoctorOptions& options, const Setup& s) {
  DoctorOptions o = options;
  if (o.overhead_steps > 0) o.steps = o.overhead_steps;
  std::printf("\n== diagnostics overhead (%d repetitions of %lld steps, batch %lld) ==\n",
              o.repeats, static_cast<long long>(o.steps), static_cast<long long>(o.batch));
  auto model = make_model(o, s);
  FixedBatches source(random_batch(o, s, o.batch), o.warmup + o.steps + 2);
  // What is switched on in each run: "off" is the reference; "on" is what
  // TrainerOptions::diagnostics.enabled gives; the others take one part away to attribute the
  // cost (GPU runs only: on the CPU there is no monitor and no device timing).
  struct Variant {
    const char* name;
    bool enabled, monitor, pcie, device_timing;
  };
  std::vector<Variant> variants = {{"off", false, true, true, true},
                                   {"on", true, true, true, true}};
  if (s.device.is_cuda()) {
    variants.push_back({"on, monitor without PCIe", true, true, false, true});
    variants.push_back({"on, no monitor", true, false, false, true});
    variants.push_back({"on, no device timing", true, true, true, false});
  }
  auto one = [&](const Variant& v) {
    optim::AdamW opt(model->named_parameters(), {.lr = 1e-4f});
    nn::CrossEntropyLoss loss;
    train::TrainerOptions t;
    t.precision = s.precision;
    t.log_interval = static_cast<int>(o.warmup + o.steps + 1);
    t.progress_bar = false;
    t.max_steps = o.warmup + o.steps + 1;
    t.quiet = true;
    t.diagnostics.enabled = v.enabled;
    t.diagnostics.monitor = v.monitor;
    t.diagnostics.monitor_pcie = v.pcie;
    t.diagnostics.device_timing = v.device_timing;
    t.diagnostics.warmup_steps = o.warmup;
    t.diagnostics.print = false;
    t.diagnostics.nvml_library = o.nvml;
    train::Trainer trainer(*model, loss, opt, t);
    // Steady-state steps only: the clock starts when batch `warmup` is asked for and stops when
    // batch `warmup + steps` is, each after the device has finished the steps before it. What
    // fit() does once at its start and end (NVML start-up, the final report) is left out: it
    // does not grow with the run.
    struct Timed : data::BatchSource {
      data::BatchSource& inner;
      int64_t warmup, steps, delivered = 0;
      double start_ms = 0, stop_ms = 0;
      Device device;
      Timed(data::BatchSource& i, int64_t w, int64_t n, Device d)
          : inner(i), warmup(w), steps(n), device(d) {}
      void start_epoch(int64_t e) override { inner.start_epoch(e); }
      bool next(data::Batch& b) override {
        if (delivered == warmup || delivered == warmup + steps) {
          core::synchronize_device(device);
          (delivered == warmup ? start_ms : stop_ms) = diag::now_ms();
        }
        ++delivered;
        return inner.next(b);
      }
      int64_t batches_per_epoch() const override { return inner.batches_per_epoch(); }
      int64_t samples_per_epoch() const override { return inner.samples_per_epoch(); }
      int64_t epoch() const override { return inner.epoch(); }
      int64_t batch_index() const override { return inner.batch_index(); }
      void restore(int64_t e, int64_t i) override { inner.restore(e, i); }
    };
    Timed timed(source, o.warmup, o.steps, s.device);
    const auto r = trainer.fit(timed, 1);
    core::synchronize_device(s.device);
    const double ms = (timed.stop_ms - timed.start_ms) / static_cast<double>(o.steps);
    return std::make_pair(ms, r.diagnosis);
  };
  std::vector<std::vector<double>> times(variants.size());
  diag::Report last;
  for (int i = 0; i < o.repeats; ++i) {
    // Rotate the order so that drift (clocks, temperature) hits every variant alike.
    std::printf("  repetition %d:", i + 1);
    for (size_t j = 0; j < variants.size(); ++j) {
      const size_t k = (j + static_cast<size_t>(i)) % variants.size();
      auto r = one(variants[k]);
      times[k].push_back(r.first);
      if (k == 1) last = r.second;
    }
    for (size_t k = 0; k < variants.size(); ++k)
      std::printf("%s %s %.4f", k ? "," : "", variants[k].name, times[k].back());
    std::printf(" ms/step\n");
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double moff = median(times[0]), mon = median(times[1]);
  const double overhead = moff > 0 ? mon / moff - 1 : 0;
  std::printf("  median: off %.4f ms/step, on %.4f ms/step: overhead %+.2f %% (target <= 1 %%)\n",
              moff, mon, 100 * overhead);
  json parts = json::array();
  for (size_t k = 2; k < variants.size(); ++k) {
    const double m = median(times[k]);
    std::printf("    %-26s %.4f ms/step: %+.2f %% over off\n", variants[k].name, m,
                moff > 0 ? 100 * (m / moff - 1) : 0.0);
    parts.push_back({{"variant", variants[k].name},
                     {"ms", times[k]},
                     {"median_ms", m},
                     {"overhead", moff > 0 ? m / moff - 1 : 0.0}});
  }
  std::printf("  verdict with diagnostics on: %s\n", last.headline.c_str());
  const std::vector<double>& off = times[0];
  const std::vector<double>& on = times[1];

  // The diagnostics calls alone, with no work between the marks: their host cost per step
  // (one data, forward, backward and optimizer phase), free of the run-to-run noise above.
  double call_us = 0;
  {
    diag::DiagnosticsOptions d;
    d.enabled = true;
    d.warmup_steps = 0;
    d.print = false;
    d.monitor = false;
    diag::Diagnostics diag(d, s.device);
    diag.begin_fit(source, 0, {}, false);
    const int n = 2000;
    const double t0 = diag::now_ms();
    for (int i = 0; i < n; ++i) {
      diag.begin_step(i);
      diag.begin(diag::Phase::forward);
      diag.begin(diag::Phase::backward);
      diag.begin(diag::Phase::optimizer);
      diag.end_step(o.batch);
    }
    call_us = (diag::now_ms() - t0) * 1e3 / n;
    diag.end_fit();
  }
  std::printf(
      "  host cost of the diagnostics calls: %.2f us per step (%s), %.3f %% of the "
      "step without diagnostics\n",
      call_us, s.device.is_cuda() ? "5 marks with CUDA timing events" : "5 marks",
      moff > 0 ? 100 * call_us / (moff * 1e3) : 0.0);
  std::fflush(stdout);
  return {{"call_us_per_step", call_us},
          {"off_ms", off},
          {"on_ms", on},
          {"median_off_ms", moff},
          {"median_on_ms", mon},
          {"overhead", overhead},
          {"variants", parts},
          {"verdict", diag::verdict_name(last.verdict)}};
}

json measurements_json(const std::vector<Measurement>& ms) {
  json a = json::array();
  for (const Measurement& m : ms)
    a.push_back({{"name", m.name},
                 {"kind", m.kind},
                 {"batch", m.batch},
                 {"ranks", m.ranks},
                 {"samples_per_s", m.samples_per_s},
                 {"step_ms", m.step_ms},
                 {"verdict", m.verdict},
                 {"input_share", m.input_share},
                 {"launch_share", m.launch_share},
                 {"comm_share", m.comm_share},
                 {"headline", m.headline},
                 {"failed", m.failed},
                 {"error", m.error}});
  return a;
}

std::vector<int64_t> sweep_sizes(const DoctorOptions& o) {
  if (!o.sweep.empty()) return o.sweep;
  std::vector<int64_t> v;
  for (int64_t b : {o.batch / 4, o.batch / 2, o.batch, o.batch * 2})
    if (b >= 1 && (v.empty() || v.back() != b)) v.push_back(b);
  return v;
}

void print_measurement(const Measurement& m) {
  if (m.failed)
    std::printf("  %-20s failed: %s\n", m.name.c_str(), m.error.c_str());
  else
    std::printf("  %-20s %12s samples/s  %9.3f ms/step  %s\n", m.name.c_str(),
                diag::format_count(m.samples_per_s).c_str(), m.step_ms, m.headline.c_str());
  std::fflush(stdout);
}

}  // namespace

std::vector<std::string> split_program_args(std::vector<std::string>& args) {
  std::vector<std::string> program;
  const auto doctor = std::find(args.begin(), args.end(), "doctor");
  if (doctor == args.end()) return program;
  const auto dash = std::find(doctor, args.end(), "--");
  if (dash == args.end()) return program;
  program.assign(dash + 1, args.end());
  args.erase(dash, args.end());
  return program;
}

std::vector<std::string> split_program(int& argc, char** argv) {
  std::vector<std::string> program;
  if (argc < 2 || std::string(argv[1]) != "doctor") return program;
  for (int i = 2; i < argc; ++i) {
    if (std::string(argv[i]) != "--") continue;
    for (int k = i + 1; k < argc; ++k) program.emplace_back(argv[k]);
    argc = i;
    break;
  }
  return program;
}

CLI::App* add_doctor_command(CLI::App& app, DoctorOptions& o) {
  CLI::App* c = app.add_subcommand(
      "doctor",
      "check the machine (driver, clocks, ECC, PCIe, other processes) and find why training is "
      "slow: real vs synthetic data, a batch-size sweep, 1 vs N GPUs (docs/diagnostics.md)");
  c->add_option("--device", o.device, "cpu, cuda or cuda:N (default: the best device)");
  c->add_flag("--no-static", o.no_static, "skip the static checks");
  c->add_flag("--no-ablations", o.no_ablations, "only the static checks");
  // Every value is checked here, before any work (packing the synthetic set takes seconds).
  constexpr int64_t kMaxBatch = int64_t{1} << 24;
  constexpr int64_t kMaxSteps = int64_t{1} << 30;
  c->add_option("--model", o.model, "bundled model: mlp or cnn")
      ->check(CLI::IsMember({"mlp", "cnn"}))
      ->capture_default_str();
  c->add_option("--width", o.width, "MLP width (default 4096 on a GPU, 256 on the CPU)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  c->add_option("--layers", o.layers, "MLP hidden layers")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  c->add_option("--precision", o.precision, "fp32, bf16 or fp16 (default bf16 on a GPU)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  c->add_option("--data", o.data,
                "real data: an LMDB from `stoker pack` (default: a synthetic set packed in a "
                "temporary folder)");
  c->add_option("--on-corrupt", o.on_corrupt,
                "a bad sample in --data: fail (stop, naming its key) or skip (replace it, "
                "count it)")
      ->check(CLI::IsMember({"fail", "skip"}))
      ->capture_default_str();
  c->add_option("--synth-images", o.synth_images, "images of the synthetic set")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
      ->capture_default_str();
  c->add_option("--synth-image-size", o.synth_image_size, "side of the synthetic images")
      ->check(CLI::Range(8, 4096))
      ->capture_default_str();
  c->add_option("--threads", o.threads, "loader decode threads (0: autotuned)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  c->add_option("--prefetch", o.prefetch, "loader depth (0: autotuned)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  c->add_option("--size", o.size, "image side the model sees")
      ->check(CLI::Range(8, 4096))
      ->capture_default_str();
  c->add_option("--batch", o.batch, "batch size (per GPU)")
      ->check(CLI::Range(int64_t{1}, kMaxBatch))
      ->capture_default_str();
  c->add_option("--sweep", o.sweep, "batch sizes of the sweep (default batch/4 .. batch*2)")
      ->check(CLI::Range(int64_t{1}, kMaxBatch))
      ->delimiter(',');
  c->add_option("--steps", o.steps, "timed steps per run")
      ->check(CLI::Range(int64_t{1}, kMaxSteps))
      ->capture_default_str();
  c->add_option("--warmup", o.warmup, "untimed steps before them")
      ->check(CLI::Range(int64_t{0}, kMaxSteps))
      ->capture_default_str();
  c->add_option("--gpus", o.gpus,
                "ranks for the 1-vs-N ablation (default: every visible GPU when there are "
                "several; with --device cpu, N processes over TCP)")
      ->check(CLI::Range(1, 1024));
  c->add_flag("--overhead", o.overhead, "measure the cost of diagnostics (off vs on)");
  c->add_option("--repeats", o.repeats, "repetitions of the overhead measurement")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  c->add_option("--overhead-steps", o.overhead_steps,
                "timed steps per overhead run (default: --steps)")
      ->check(CLI::Range(int64_t{1}, kMaxSteps));
  // The output paths are checked (and their folders created) by run_doctor before any work.
  c->add_option("--json", o.json, "write everything measured to this JSON file");
  c->add_option("--trace", o.trace, "Chrome trace of the real-data run");
  c->add_option("--save-baseline", o.save_baseline, "baseline card of the real-data run");
  c->add_option("--compare", o.compare_baseline, "compare the real-data run with this card")
      ->check(CLI::ExistingFile);
  c->add_option("--nvml", o.nvml, "NVML library to load")->capture_default_str();
  c->add_option("--worker-json", o.worker_json, "internal: one rank of the 1-vs-N ablation")
      ->group("");
  c->footer(
      "After `--`: your Trainer-based program and its arguments ({batch} is replaced by each "
      "size of the sweep); it is run with STOKER_DIAG=1 and friends (docs/diagnostics.md).\n"
      "Examples:\n"
      "  stoker doctor                                  # the machine + the bundled MLP\n"
      "  stoker doctor --data /data/imagenet-train --model cnn --threads 4\n"
      "  stoker doctor --sweep 64,128,256 -- ./train --batch {batch} --epochs 1");
  return c;
}

int run_doctor(DoctorOptions o) {
  const Device device = parse_device_flag(o.device);
  Setup s{device,
          parse_precision(o.precision.empty() ? (device.is_cuda() ? "bf16" : "fp32") : o.precision),
          o.width > 0 ? o.width : (device.is_cuda() ? 4096 : 256)};
  o.precision = std::string(amp::precision_name(s.precision));
  o.width = s.width;
  STOKER_CHECK(o.steps >= 1 && o.warmup >= 0 && o.batch >= 1 && o.size >= 8,
               "stoker doctor: --steps, --batch must be >= 1, --size >= 8");
  if (!o.worker_json.empty()) return run_worker(o);
  // Where the results go is checked now, not after the ablations.
  if (!o.json.empty()) core::check_output_path(o.json, "--json");
  if (!o.trace.empty()) core::check_output_path(o.trace, "--trace");
  if (!o.save_baseline.empty()) core::check_output_path(o.save_baseline, "--save-baseline");

  json out = {{"device", device.str()}};
  std::printf("stoker doctor %s on %s\n", core::version(), core::describe_device(device).c_str());
  if (!o.no_static) out["static"] = run_static(o);
  if (o.no_ablations && !o.overhead) {
    if (!o.json.empty()) std::ofstream(o.json) << out.dump(2) << "\n";
    return 0;
  }

  const fs::path tmp = fs::temp_directory_path() / ("stoker_doctor_" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  struct Cleanup {
    fs::path p;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  } cleanup{tmp};

  std::vector<Measurement> ms;
  const int visible = core::cuda_device_count();
  const int ranks = o.gpus > 0 ? o.gpus : (device.is_cuda() ? visible : 1);
  if (!o.no_ablations && !o.program.empty()) {
    // The user's program.
    std::printf("\n== ablations on %s (%lld + %lld steps each) ==\n", o.program.front().c_str(),
                static_cast<long long>(o.warmup), static_cast<long long>(o.steps));
    ms.push_back(run_program(o, "real data", "real", o.batch, 1, false, tmp));
    print_measurement(ms.back());
    ms.push_back(run_program(o, "synthetic data", "synthetic", o.batch, 1, true, tmp));
    print_measurement(ms.back());
    bool placeholder = false;
    for (const auto& a : o.program)
      placeholder = placeholder || a.find("{batch}") != std::string::npos;
    if (placeholder) {
      for (int64_t b : sweep_sizes(o)) {
        ms.push_back(run_program(o, "batch " + std::to_string(b), "sweep", b, 1, true, tmp));
        print_measurement(ms.back());
      }
    } else {
      std::printf("  (no batch-size sweep: put {batch} where your program takes its batch size)\n");
    }
    if (ranks > 1) {
      for (int n : {1, ranks}) {
        ms.push_back(run_program(o, std::to_string(n) + " ranks", "ranks", o.batch, n, true, tmp));
        print_measurement(ms.back());
      }
    }
  } else if (!o.no_ablations) {
    std::printf(
        "\n== ablations: bundled %s (width %lld) on %s, %s, images %dx%d, batch %lld, "
        "%lld + %lld steps each ==\n",
        o.model.c_str(), static_cast<long long>(s.width), device.str().c_str(), o.precision.c_str(),
        o.size, o.size, static_cast<long long>(o.batch), static_cast<long long>(o.warmup),
        static_cast<long long>(o.steps));
    // Real data through the Loader, then the same Loader's first batch replayed.
    fs::path db = o.data;
    if (db.empty()) {
      db = tmp / "synth";
      std::printf("  packing %lld synthetic %dx%d JPEGs into %s (use --data for your own)\n",
                  static_cast<long long>(o.synth_images), o.synth_image_size, o.synth_image_size,
                  db.c_str());
      std::fflush(stdout);
      data::pack_synth(
          {.samples = o.synth_images, .classes = kClasses, .size = o.synth_image_size, .seed = 1},
          db, {.progress = false});
    }
    data::LmdbImageDataset ds(db);
    data::LoaderOptions lo{.batch_size = o.batch,
                           .threads = o.threads,
                           .prefetch = o.prefetch,
                           .transform = {.output_size = o.size},
                           .seed = 1,
                           .device = device,
                           .dtype = amp::compute_dtype(s.precision),
                           .on_corrupt = o.on_corrupt == "skip" ? data::CorruptPolicy::skip
                                                                : data::CorruptPolicy::fail};
    {
      data::Loader loader(ds, lo);
      diag::DiagnosticsOptions d;
      d.trace_path = o.trace;
      d.baseline_save = o.save_baseline;
      d.baseline_compare = o.compare_baseline;
      const diag::Report real = train(o, s, loader, d);
      std::fputs(real.text().c_str(), stdout);
      ms.push_back(to_measurement("real data", "real", o.batch, 1, real));
      print_measurement(ms.back());
      if (lo.on_corrupt == data::CorruptPolicy::skip)
        std::printf("  --on-corrupt skip: %lld bad samples of %s skipped\n",
                    static_cast<long long>(loader.counters().skipped), db.c_str());
      d = {};
      d.synthetic_data = true;
      const diag::Report synth = train(o, s, loader, d);
      ms.push_back(to_measurement("synthetic data", "synthetic", o.batch, 1, synth));
      print_measurement(ms.back());
    }
    // The model alone at several batch sizes.
    for (int64_t b : sweep_sizes(o)) {
      Measurement m;
      try {
        FixedBatches src(random_batch(o, s, b), o.warmup + o.steps + 1);
        m = to_measurement("batch " + std::to_string(b), "sweep", b, 1, train(o, s, src, {}));
      } catch (const Error& e) {  // e.g. out of memory at the largest size
        m.name = "batch " + std::to_string(b);
        m.kind = "sweep";
        m.batch = b;
        m.failed = true;
        m.error = e.message();
      }
      ms.push_back(m);
      print_measurement(ms.back());
    }
    // 1 vs N ranks.
    if (ranks > 1) {
      for (int n : {1, ranks}) {
        ms.push_back(run_ranks(o, s, n, tmp));
        print_measurement(ms.back());
      }
    } else {
      std::printf("  (1 vs N GPUs: one GPU visible, skipped; --gpus N forces it)\n");
    }
  }
  if (!ms.empty()) {
    std::printf("\n== measurements ==\n%s", diag::measurement_table(ms).c_str());
    std::printf("\n== conclusions ==\n");
    for (const std::string& c : diag::conclude(ms)) std::printf("  - %s\n", c.c_str());
    out["measurements"] = measurements_json(ms);
    out["conclusions"] = diag::conclude(ms);
  }
  if (o.overhead) out["overhead"] = run_overhead(o, s);
  if (!o.json.empty()) {
    std::ofstream f(o.json);
    f << out.dump(2) << "\n";
    STOKER_CHECK(f.good(), "stoker doctor: cannot write ", o.json);
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace stoker::cli
