// GpuMonitor: NVML sampling thread. Sampling costs about a dozen NVML calls (tens of
// microseconds in total) per interval on a thread of its own; the training thread only ever
// takes the mutex to copy samples out at report time.
#include "diag/gpu_monitor.h"

#include <algorithm>
#include <cstdio>
#include <mutex>

#include "diag/nvml_api.h"
#include "diag/step_timer.h"
#include "stoker/core/error.h"
#include "stoker/diag/report.h"

#if STOKER_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace stoker::diag {

namespace {

void report_once(const std::string& why) {
  static std::once_flag once;
  std::call_once(once, [&] { std::fprintf(stderr, "stoker: diagnostics: %s\n", why.c_str()); });
}

}  // namespace

std::string describe_clock_events(uint64_t r) {
  using namespace clock_event;
  std::string out;
  auto add = [&](uint64_t bit, const char* name) {
    if (!(r & bit)) return;
    if (!out.empty()) out += ", ";
    out += name;
  };
  add(kGpuIdle, "idle");
  add(kApplicationsClocksSetting, "application clocks");
  add(kSwPowerCap, "power cap");
  add(kHwSlowdown, "hardware slowdown");
  add(kSyncBoost, "sync boost");
  add(kSwThermalSlowdown, "thermal (software)");
  add(kHwThermalSlowdown, "thermal (hardware)");
  add(kHwPowerBrakeSlowdown, "power brake");
  add(kDisplayClockSetting, "display clock");
  const uint64_t known = 0x1FF;
  if (r & ~known) {
    if (!out.empty()) out += ", ";
    char buf[32];
    std::snprintf(buf, sizeof buf, "other 0x%llx", static_cast<unsigned long long>(r & ~known));
    out += buf;
  }
  return out.empty() ? "none" : out;
}

GpuHealth summarize_samples(const std::vector<GpuSample>& samples) {
  GpuHealth h;
  h.available = true;
  h.status = "ok";
  h.samples = static_cast<int>(samples.size());
  if (samples.empty()) return h;
  auto is_busy = [](const GpuSample& s) {
    const bool idle = s.clock_events >= 0 && (s.clock_events & clock_event::kGpuIdle);
    return !idle && s.util_gpu != 0;
  };
  for (const GpuSample& s : samples) h.busy_samples += is_busy(s) ? 1 : 0;
  const bool use_busy = h.busy_samples > 0;
  // Mean of a field over the chosen samples, skipping unreadable (-1) values.
  auto mean = [&](auto field, bool busy_only) {
    double sum = 0;
    int n = 0;
    for (const GpuSample& s : samples) {
      if (busy_only && use_busy && !is_busy(s)) continue;
      const double v = static_cast<double>(field(s));
      if (v < 0) continue;
      sum += v;
      ++n;
    }
    return n > 0 ? sum / n : -1.0;
  };
  auto max_of = [&](auto field) {
    double m = -1;
    for (const GpuSample& s : samples) m = std::max(m, static_cast<double>(field(s)));
    return m;
  };
  h.sm_clock_mhz = mean([](const GpuSample& s) { return s.sm_clock_mhz; }, true);
  h.sm_clock_max_mhz = max_of([](const GpuSample& s) { return s.sm_clock_max_mhz; });
  h.mem_clock_mhz = mean([](const GpuSample& s) { return s.mem_clock_mhz; }, true);
  h.mem_clock_max_mhz = max_of([](const GpuSample& s) { return s.mem_clock_max_mhz; });
  h.power_w = mean([](const GpuSample& s) { return s.power_w; }, true);
  h.power_max_w = max_of([](const GpuSample& s) { return s.power_w; });
  h.power_limit_w = max_of([](const GpuSample& s) { return s.power_limit_w; });
  h.temperature_c = mean([](const GpuSample& s) { return s.temperature_c; }, false);
  h.temperature_max_c = max_of([](const GpuSample& s) { return s.temperature_c; });
  h.util_gpu = mean([](const GpuSample& s) { return s.util_gpu; }, false);
  h.util_memory = mean([](const GpuSample& s) { return s.util_memory; }, false);
  h.pcie_tx_mb_s = mean([](const GpuSample& s) { return s.pcie_tx_mb_s; }, false);
  h.pcie_rx_mb_s = mean([](const GpuSample& s) { return s.pcie_rx_mb_s; }, false);
  int n = 0, power = 0, thermal = 0, hw = 0, brake = 0, slow = 0;
  for (const GpuSample& s : samples) {
    if ((use_busy && !is_busy(s)) || s.clock_events < 0) continue;
    const uint64_t r = static_cast<uint64_t>(s.clock_events);
    ++n;
    power += (r & clock_event::kSwPowerCap) ? 1 : 0;
    thermal += (r & (clock_event::kSwThermalSlowdown | clock_event::kHwThermalSlowdown)) ? 1 : 0;
    hw += (r & clock_event::kHwSlowdown) ? 1 : 0;
    brake += (r & clock_event::kHwPowerBrakeSlowdown) ? 1 : 0;
    slow += (r & clock_event::kSlowdown) ? 1 : 0;
  }
  if (n > 0) {
    h.power_cap_share = static_cast<double>(power) / n;
    h.thermal_share = static_cast<double>(thermal) / n;
    h.hw_slowdown_share = static_cast<double>(hw) / n;
    h.power_brake_share = static_cast<double>(brake) / n;
    h.slowdown_share = static_cast<double>(slow) / n;
  }
  return h;
}

std::string GpuHealth::line() const {
  if (!available) return "not monitored (" + status + ")";
  if (samples == 0) return "no samples yet";
  std::string s;
  char buf[160];
  auto part = [&](const std::string& p) {
    if (!s.empty()) s += ", ";
    s += p;
  };
  if (sm_clock_mhz >= 0) {
    std::string p = "SM " + format_count(sm_clock_mhz);
    if (sm_clock_max_mhz > 0) {
      std::snprintf(buf, sizeof buf, "/%s MHz (%.0f %%)", format_count(sm_clock_max_mhz).c_str(),
                    100.0 * sm_clock_mhz / sm_clock_max_mhz);
      p += buf;
    } else {
      p += " MHz";
    }
    part(p);
  }
  if (mem_clock_mhz >= 0)
    part("memory " + format_count(mem_clock_mhz) +
         (mem_clock_max_mhz > 0 ? "/" + format_count(mem_clock_max_mhz) : std::string()) + " MHz");
  if (power_w >= 0) {
    std::snprintf(buf, sizeof buf, "power %.0f", power_w);
    std::string p = buf;
    if (power_limit_w > 0) {
      std::snprintf(buf, sizeof buf, "/%.0f", power_limit_w);
      p += buf;
    }
    part(p + " W");
  }
  if (temperature_c >= 0) {
    std::snprintf(buf, sizeof buf, "%.0f C (max %.0f)", temperature_c, temperature_max_c);
    part(buf);
  }
  if (util_gpu >= 0) {
    std::snprintf(buf, sizeof buf, "util %.0f %% (memory %.0f %%)", util_gpu,
                  std::max(0.0, util_memory));
    part(buf);
  }
  if (pcie_tx_mb_s >= 0 || pcie_rx_mb_s >= 0) {
    std::snprintf(buf, sizeof buf, "PCIe tx %.2f rx %.2f GB/s", std::max(0.0, pcie_tx_mb_s) / 1e3,
                  std::max(0.0, pcie_rx_mb_s) / 1e3);
    part(buf);
  }
  std::snprintf(buf, sizeof buf, "slowdown reasons in %.0f %% of busy samples",
                100 * slowdown_share);
  std::string p = buf;
  if (slowdown_share > 0) {
    std::snprintf(buf, sizeof buf,
                  " (power cap %.0f %%, thermal %.0f %%, hw %.0f %%, brake %.0f %%)",
                  100 * power_cap_share, 100 * thermal_share, 100 * hw_slowdown_share,
                  100 * power_brake_share);
    p += buf;
  }
  part(p);
  std::snprintf(buf, sizeof buf, "; %d samples", samples);
  return s + buf;
}

struct GpuMonitor::Impl {
  std::shared_ptr<const nvml::Api> api;
  nvml::Device dev = nullptr;
};

GpuMonitor::GpuMonitor(Device device, GpuMonitorOptions options)
    : device_(device), options_(std::move(options)) {
  if (!device_.is_cuda()) {
    status_ = "not a GPU run (" + device_.str() + ")";
    return;
  }
  std::string why;
  auto api = nvml::load(options_.library, &why);
  if (!api) {
    status_ = why;
    if (options_.report_unavailable) report_once(why);
    return;
  }
  impl_ = std::make_unique<Impl>();
  impl_->api = api;
  // CUDA and NVML may number GPUs differently (CUDA_VISIBLE_DEVICES, PCI order): match by bus.
#if STOKER_WITH_CUDA
  char bus[64] = {};
  if (api->handle_by_pci_bus_id &&
      cudaDeviceGetPCIBusId(bus, sizeof bus, device_.index) == cudaSuccess) {
    if (api->handle_by_pci_bus_id(bus, &impl_->dev) != nvml::kSuccess) impl_->dev = nullptr;
  }
  cudaGetLastError();
#endif
  if (!impl_->dev && api->handle_by_index) {
    if (api->handle_by_index(static_cast<unsigned>(device_.index), &impl_->dev) != nvml::kSuccess)
      impl_->dev = nullptr;
  }
  if (!impl_->dev) {
    status_ = "NVML has no device for " + device_.str() + ": the GPU is not monitored";
    if (options_.report_unavailable) report_once(status_);
    impl_.reset();
    return;
  }
  char name[96] = {};
  if (api->name && api->name(impl_->dev, name, sizeof name) == nvml::kSuccess) name_ = name;
  available_ = true;
  status_ = "ok";
  sample_now();
  thread_ = std::thread([this] { run(); });
}

GpuMonitor::~GpuMonitor() { stop(); }

void GpuMonitor::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

GpuSample GpuMonitor::read() const {
  GpuSample s;
  s.time_ms = now_ms();
  if (!impl_) return s;
  const nvml::Api& a = *impl_->api;
  nvml::Device d = impl_->dev;
  unsigned int u = 0;
  auto ok = [](nvml::Return r) { return r == nvml::kSuccess; };
  if (a.clock && ok(a.clock(d, nvml::kClockSm, &u))) s.sm_clock_mhz = static_cast<int>(u);
  if (a.max_clock && ok(a.max_clock(d, nvml::kClockSm, &u)))
    s.sm_clock_max_mhz = static_cast<int>(u);
  if (a.clock && ok(a.clock(d, nvml::kClockMem, &u))) s.mem_clock_mhz = static_cast<int>(u);
  if (a.max_clock && ok(a.max_clock(d, nvml::kClockMem, &u)))
    s.mem_clock_max_mhz = static_cast<int>(u);
  if (a.power_usage && ok(a.power_usage(d, &u))) s.power_w = u / 1e3;
  if (a.enforced_power_limit && ok(a.enforced_power_limit(d, &u))) s.power_limit_w = u / 1e3;
  if (a.temperature && ok(a.temperature(d, nvml::kTemperatureGpu, &u)))
    s.temperature_c = static_cast<int>(u);
  nvml::Utilization util{};
  if (a.utilization && ok(a.utilization(d, &util))) {
    s.util_gpu = static_cast<int>(util.gpu);
    s.util_memory = static_cast<int>(util.memory);
  }
  unsigned long long reasons = 0;
  if (a.clock_events && ok(a.clock_events(d, &reasons)))
    s.clock_events = static_cast<int64_t>(reasons);
  // NVML reports PCIe throughput in KB/s over a 20 ms window.
  if (options_.pcie && a.pcie_throughput && ok(a.pcie_throughput(d, nvml::kPcieUtilTxBytes, &u)))
    s.pcie_tx_mb_s = u * 1.024e-3;
  if (options_.pcie && a.pcie_throughput && ok(a.pcie_throughput(d, nvml::kPcieUtilRxBytes, &u)))
    s.pcie_rx_mb_s = u * 1.024e-3;
  nvml::Memory mem{};
  if (a.memory_info && ok(a.memory_info(d, &mem)))
    s.memory_used_mib = static_cast<double>(mem.used) / (1 << 20);
  return s;
}

void GpuMonitor::sample_now() {
  if (!available_) return;
  GpuSample s = read();
  std::lock_guard<std::mutex> lock(mu_);
  samples_.push_back(s);
  while (samples_.size() > options_.max_samples) samples_.pop_front();
}

void GpuMonitor::run() {
  const auto interval = std::chrono::duration<double>(std::max(0.001, options_.interval_s));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (cv_.wait_for(lock, interval, [&] { return stop_; })) break;
    lock.unlock();
    sample_now();
    lock.lock();
  }
}

std::vector<GpuSample> GpuMonitor::samples(double since_ms) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<GpuSample> out;
  for (const GpuSample& s : samples_)
    if (since_ms < 0 || s.time_ms >= since_ms) out.push_back(s);
  return out;
}

GpuHealth GpuMonitor::health(double since_ms) const {
  if (!available_) {
    GpuHealth h;
    h.status = status_;
    return h;
  }
  GpuHealth h = summarize_samples(samples(since_ms));
  h.name = name_;
  return h;
}

}  // namespace stoker::diag
