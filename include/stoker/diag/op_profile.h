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

namespace stoker::diag {

// A device's roofs. Zeros when unknown (the CPU, a GPU missing from the table).
struct DevicePeaks {
  std::string source;         // "table: NVIDIA H200", "unknown GPU ...", "cpu"
  double tensor_tflops = 0;   // bf16/f16 dense tensor-core peak
  double tf32_tflops = 0;     // tf32 tensor-core peak (fp32 GEMMs with TF32 allowed)
  double fp32_tflops = 0;     // fp32 without tensor cores
  double bandwidth_gb_s = 0;  // device memory bandwidth
  bool known() const { return tensor_tflops > 0 && bandwidth_gb_s > 0; }
  // The compute roof for an op on `dtype` (f32: TF32's when `tf32`; u8, the FP8 GEMM's codes:
  // twice the bf16 tensor peak).
  double compute_tflops(DType dtype, bool tf32) const;
};

// The peaks of a GPU by its model name (cudaDeviceProp::name / NVML's), from the vendors'
// datasheets (dense, no sparsity; SXM boards unless the name says PCIe/NVL). Unknown models
// give zeros and say so in `source`.
DevicePeaks peaks_for_gpu(std::string_view name);
// The peaks of `device`: the table for its GPU model; the CPU's are unknown.
DevicePeaks device_peaks(Device device);

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

// One row of the op table: an op family, a module or an op name.
struct OpRow {
  std::string key;
  std::string family;         // for module and op rows: the family taking most of its time
  double calls = 0;           // per step
  double ms = 0;              // device ms per step
  double share = 0;           // of the step's device time
  double tflops = 0;          // achieved: FLOPs / time
  double gb_s = 0;            // achieved: bytes / time
  double intensity = 0;       // FLOPs per byte
  double compute_pct = -1;    // of the compute roof (-1: peaks unknown)
  double bandwidth_pct = -1;  // of the bandwidth roof (-1: peaks unknown)
  bool memory_bound = false;  // intensity below the ridge point (peaks known)
};

struct OpTable {
  int64_t steps = 0;         // op-timed steps summarized
  bool device_timed = true;  // times from CUDA events (false: the host clock, on the CPU)
  double step_ms = 0;        // device ms per step
  double op_ms = 0;          // sum of the ops' device ms per step
  double idle_ms = 0;        // step_ms - op_ms, floored at 0: gaps between ops (launch gaps,
                             // waits for input or communication, kernels outside any op)
  double idle_share = 0;     // idle_ms / step_ms
  double tflops = 0;         // all ops' FLOPs / step time
  // Communication ("communication" family: the gradient syncs' bucket all-reduces, timed on
  // the comm stream; not part of op_ms, since it overlaps the compute stream's work).
  double comm_calls = 0;          // buckets per step
  double comm_ms = 0;             // their summed device time per step
  double exposed_comm_ms = -1;    // the step's exposed communication (its comm phase), when known
  double hidden_comm_share = -1;  // 1 - exposed / comm_ms: the share hidden behind backward
  DevicePeaks peaks;
  std::vector<OpRow> families, modules, ops;  // most time first
  // The bandwidth-bound finding: the share of the step in memory-bound ops near the bandwidth
  // roof, their achieved share of the roof, and the ops to fuse first (by time).
  double bandwidth_bound_share = 0;
  double bandwidth_bound_roof_pct = 0;
  std::vector<std::string> fuse_candidates;
  // GEMMs with a dimension whose rows are not whole 16-byte vectors (m, n or k not a multiple of
  // 8 in f16/bf16, of 4 in f32): cuBLASLt runs them on slower unaligned kernels. Per step: their
  // calls, device ms and share of the step, and the slowest one's shape ("m x n x k").
  double misaligned_gemm_calls = 0;
  double misaligned_gemm_ms = 0;
  double misaligned_gemm_share = 0;
  std::string misaligned_gemm_example;

  bool empty() const { return steps == 0; }
  // "diag  ops ..." lines: the family table, the top modules and ops, idle time.
  std::string text(size_t top = 8) const;
  std::string json() const;
  // Sets exposed_comm_ms and hidden_comm_share from the step's exposed communication.
  void set_exposed_comm(double exposed_ms);
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
