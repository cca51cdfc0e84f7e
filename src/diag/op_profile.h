// Where the GPU time of a step goes, op by op: the op table with each op family's and module's
// share of the step, its achieved TFLOP/s and GB/s against the device's roofs, the GPU idle time
// inside the step, and the bandwidth-bound finding (docs/diagnostics.md "Where the GPU time
// goes").
//
// Every `DiagnosticsOptions::op_timing_interval` steps the Diagnostics time one step op by op
// (OpTimer: a timing event before and after each op launch on the compute stream, on the CPU
// the host clock); the records of those steps come here. summarize_ops is a pure function of
// them, so the table and the finding are unit-tested on recorded timings.
//
// The roofline: an op of arithmetic intensity I = FLOPs / bytes can reach at most
// min(compute peak, I × bandwidth peak). Below the ridge point (compute peak / bandwidth peak)
// the bandwidth roof is the lower one: the op is memory-bound, and only moving fewer bytes
// (fusing it with its neighbours) makes it faster.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/core/device.h"
#include "stoker/core/dtype.h"
#include "stoker/core/op_listener.h"
#include "stoker/diag/report.h"

namespace stoker::diag {

// "matmul", "convolution", "batch norm", "layer norm", "attention", "elementwise",
// "reduction", "pooling", "embedding", "loss", "optimizer", "layout", "random", "communication"
// (core::kGradSyncBucketOp) or "other", from the backend op's name.
std::string op_family(std::string_view op_name);

// One op as timed on the device (or the host, on the CPU).
struct OpRecord {
  std::string name;    // backend op ("gemm", "layernorm_forward")
  std::string module;  // module path at its launch ("" outside any container)
  core::OpCost cost;
  double ms = 0;        // device time from the event before its launch to the one after
  double start_ms = 0;  // when it started, after the step's first event
};

// One op-timed step.
struct OpStep {
  int64_t step = 0;
  double step_ms = 0;  // device time of the whole step (first event to last)
  std::vector<OpRecord> ops;
};

// A GEMM whose m, n or k is not a whole number of 16-byte vectors of its dtype.
bool gemm_misaligned(const core::OpCost& cost);

// The op table of `steps` (their per-step means) on a device with `peaks`; `tf32` says whether
// fp32 GEMMs may use TF32 (ops::allow_tf32()). Memory-bound op kinds that reach at least
// `near_bandwidth_roof` of the bandwidth roof and less than 10 % of the compute roof count as
// bandwidth-bound (moving bytes limits
// them); further below it they are latency-bound (too small to fill the GPU).
OpTable summarize_ops(const std::vector<OpStep>& steps, const DevicePeaks& peaks, bool tf32 = false,
                      double near_bandwidth_roof = 0.30);

}  // namespace stoker::diag
