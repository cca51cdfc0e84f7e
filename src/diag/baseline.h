// Baseline card: a JSON record of how fast a run was and under which conditions, saved on
// request and compared on a later run (docs/diagnostics.md; google/benchmark's context block
// is the model for the environment part).
//
// A card holds the environment (GPU, driver, CUDA runtime, cuDNN, NCCL, CPU model and count,
// stoker version, the run's configuration) and, per metric (step time and each phase: device
// spans on a GPU, host spans on the CPU), the median and p90 over the run's timed steps plus
// the medians of `kChunks` consecutive chunks of those steps. The spread of the chunk medians
// (their standard deviation) is the card's measured noise.
//
// compare_cards flags a metric when its median moved by more than both
//   kNoiseFactor * sqrt(noise_before^2 + noise_after^2)   and   min_relative * median_before
// (and at least 1 microsecond): beyond the measured noise and beyond a relative floor, so a
// quiet run does not flag 0.3 % changes. Environment fields that differ are listed, so "slower
// because the driver changed" is told apart from "the code regressed".
//
// Thread-safety: free functions on values.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "diag/step_timer.h"
#include "stoker/core/device.h"

namespace stoker::diag {

struct Environment {
  std::string date;  // ISO 8601, UTC
  std::string host;
  std::string stoker_version;
  std::string device;  // "cuda:0" / "cpu"
  std::string gpu;     // describe_device(), "" on the CPU
  std::string driver;  // NVIDIA driver version (NVML), "" when unknown
  std::string cuda_runtime, cuda_driver, cudnn, nccl;  // "" when not built/absent
  std::string cpu;
  int cpu_count = 0;
  std::map<std::string, std::string> run;  // configuration: model, precision, batch size, ...
};

// The environment of this process for `device` (NVML, when present, for the driver version).
Environment collect_environment(Device device, std::map<std::string, std::string> run = {});

struct MetricCard {
  std::string name;  // "step", "data", "forward", "backward", "comm", "optimizer", "launch"
  double median_ms = 0, p90_ms = 0;
  std::vector<double> chunk_medians_ms;
  double noise_ms = 0;  // standard deviation of chunk_medians_ms
};

struct BaselineCard {
  int version = 1;
  Environment env;
  std::string timing;  // "device" (GPU spans) or "host"
  int64_t steps = 0;
  double samples_per_s = 0;
  std::string verdict;
  std::vector<MetricCard> metrics;
  const MetricCard* find(const std::string& name) const;
};

inline constexpr int kChunks = 10;
inline constexpr double kNoiseFactor = 2.0;

// A card from the run's timed steps (after warm-up), in step order.
BaselineCard make_card(const Environment& env, std::span<const StepSample> steps,
                       const std::string& verdict);

std::string card_json(const BaselineCard& card);
BaselineCard parse_card(const std::string& json);  // throws stoker::Error on a bad card
void save_card(const std::filesystem::path& path, const BaselineCard& card);  // atomic
BaselineCard load_card(const std::filesystem::path& path);

struct MetricChange {
  std::string name;
  double before_ms = 0, after_ms = 0;
  double change = 0;    // (after - before) / before
  double noise_ms = 0;  // sqrt(noise_before^2 + noise_after^2)
  bool significant = false;
};

struct Comparison {
  std::vector<MetricChange> metrics;
  std::vector<std::string> environment_changes;  // "driver: 580.95 -> 580.159"
  bool comparable = true;                        // same timing domain
  // Metrics flagged slower / faster.
  int slower() const;
  int faster() const;
  std::string text() const;  // lines starting with "diag  baseline"
};

Comparison compare_cards(const BaselineCard& before, const BaselineCard& after,
                         double min_relative = 0.02);

}  // namespace stoker::diag
