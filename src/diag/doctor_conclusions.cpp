// The conclusions of `stoker doctor`'s ablations from their measurements, and their table (the
// static checks of the machine: doctor.cpp).
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "diag/doctor.h"
#include "diag/number_format.h"
#include "stoker/diag/report.h"

namespace stoker::diag {

using detail::fmt;

std::vector<std::string> conclude(const std::vector<Measurement>& m) {
  std::vector<std::string> out;
  auto find = [&](const std::string& kind) -> const Measurement* {
    for (const Measurement& x : m)
      if (x.kind == kind && !x.failed) return &x;
    return nullptr;
  };
  for (const Measurement& x : m)
    if (x.failed) out.push_back(x.name + " could not run: " + x.error);

  // Synthetic vs real data.
  const Measurement* real = find("real");
  const Measurement* synth = find("synthetic");
  if (real && synth && synth->samples_per_s > 0) {
    const double ratio = real->samples_per_s / synth->samples_per_s;
    if (ratio < 0.9)
      out.push_back("the input pipeline limits training: real data trains at " +
                    format_count(real->samples_per_s) + " samples/s, the same model on a batch " +
                    "already in memory at " + format_count(synth->samples_per_s) + " (" +
                    fmt("%.0f", 100 * ratio) + " %); with real data: " + real->headline);
    else
      out.push_back("the input pipeline keeps up: real data trains at " +
                    fmt("%.0f", 100 * std::min(ratio, 9.99)) +
                    " % of the throughput with a batch already in memory (" +
                    format_count(real->samples_per_s) + " vs " +
                    format_count(synth->samples_per_s) + " samples/s)");
  }
  if (real && synth && synth->samples_per_s > 0 &&
      real->samples_per_s >= 0.9 * synth->samples_per_s && real->input_share >= 0.20)
    out.push_back("yet the real-data steps wait for data " + fmt("%.0f", 100 * real->input_share) +
                  " % of the time: on a machine with few cores the loader's threads slow the "
                  "model down as much as they feed it");
  if (synth) out.push_back("the model itself (no input pipeline): " + synth->headline);

  // Batch-size sweep.
  std::vector<const Measurement*> sweep;
  for (const Measurement& x : m)
    if (x.kind == "sweep" && !x.failed && x.samples_per_s > 0) sweep.push_back(&x);
  std::sort(sweep.begin(), sweep.end(),
            [](const Measurement* a, const Measurement* b) { return a->batch < b->batch; });
  if (sweep.size() >= 2) {
    const Measurement* first = sweep.front();
    const Measurement* last = sweep.back();
    double best = 0;
    for (const Measurement* x : sweep) best = std::max(best, x->samples_per_s);
    int64_t enough = last->batch;
    for (const Measurement* x : sweep)
      if (x->samples_per_s >= 0.9 * best) {
        enough = x->batch;
        break;
      }
    const double growth = last->samples_per_s / first->samples_per_s;
    if (growth >= 1.3)
      out.push_back("throughput grows " + fmt("%.1f", growth) + "x from batch " +
                    std::to_string(first->batch) + " to " + std::to_string(last->batch) +
                    ": at batch " + std::to_string(first->batch) + " the step is " +
                    first->verdict + "; batch " + std::to_string(enough) +
                    " reaches 90 % of the best throughput (" + format_count(best) + " samples/s)");
    else
      out.push_back("throughput is flat from batch " + std::to_string(first->batch) + " to " +
                    std::to_string(last->batch) + " (x" + fmt("%.2f", growth) +
                    "): the device is saturated already at batch " + std::to_string(first->batch) +
                    " (" + first->verdict + ")");
  }

  // The step as a CUDA graph against the same step eager: the sweep's run at its batch (the
  // model alone on a batch held on the device), else the replayed batch.
  if (const Measurement* graph = find("graph"); graph && graph->samples_per_s > 0) {
    const Measurement* eager = nullptr;
    for (const Measurement& x : m)
      if (x.kind == "sweep" && !x.failed && x.batch == graph->batch && x.samples_per_s > 0)
        eager = &x;
    if (!eager && synth && synth->batch == graph->batch) eager = synth;
    if (eager) {
      const double gain = graph->samples_per_s / eager->samples_per_s;
      const std::string rates = " (" + format_count(graph->samples_per_s) + " vs " +
                                format_count(eager->samples_per_s) + " samples/s at batch " +
                                std::to_string(graph->batch) + ")";
      if (gain >= 1.05)
        out.push_back("a CUDA graph makes the step " + fmt("%.0f", 100 * (gain - 1)) + " % faster" +
                      rates + ": the host's launches hold the GPU back; turn on " +
                      "TrainerOptions::cuda_graph (--cuda-graph in the example trainers)");
      else
        out.push_back("a CUDA graph changes little (x" + fmt("%.2f", gain) + rates +
                      "): the host launches the step's kernels faster than the GPU runs them");
    }
  }

  // 1 vs N GPUs.
  const Measurement* one = nullptr;
  const Measurement* many = nullptr;
  for (const Measurement& x : m) {
    if (x.kind != "ranks" || x.failed) continue;
    if (x.ranks == 1) one = &x;
    if (x.ranks > 1 && (!many || x.ranks > many->ranks)) many = &x;
  }
  if (one && many && one->samples_per_s > 0) {
    const double eff = many->samples_per_s / (many->ranks * one->samples_per_s);
    const std::string n = std::to_string(many->ranks);
    const std::string rates = " (" + format_count(many->samples_per_s) + " vs " +
                              format_count(one->samples_per_s) + " samples/s)";
    if (eff >= 0.9)
      out.push_back(many->name + " train at " + fmt("%.0f", 100 * eff) + " % of " + n + " times " +
                    one->name + rates + ": data parallelism scales");
    else
      out.push_back(many->name + " reach only " + fmt("%.0f", 100 * eff) + " % of " + n +
                    " times " + one->name + rates + "; with " + many->name + " the step is " +
                    many->verdict + " (exposed communication " +
                    fmt("%.1f", 100 * many->comm_share) + " % of the step)");
  }
  return out;
}

std::string measurement_table(const std::vector<Measurement>& m) {
  std::string s;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-22s %7s %5s %12s %10s  %-20s %6s %6s %6s\n", "run", "batch",
                "ranks", "samples/s", "step ms", "verdict", "input", "launch", "comm");
  s += buf;
  for (const Measurement& x : m) {
    if (x.failed) {
      std::snprintf(buf, sizeof buf, "%-22s %7lld %5d  failed: %s\n", x.name.c_str(),
                    static_cast<long long>(x.batch), x.ranks, x.error.c_str());
    } else {
      std::snprintf(buf, sizeof buf, "%-22s %7lld %5d %12s %10.3f  %-20s %5.1f%% %5.1f%% %5.1f%%\n",
                    x.name.c_str(), static_cast<long long>(x.batch), x.ranks,
                    format_count(x.samples_per_s).c_str(), x.step_ms, x.verdict.c_str(),
                    100 * x.input_share, 100 * x.launch_share, 100 * x.comm_share);
    }
    s += buf;
  }
  return s;
}

}  // namespace stoker::diag
