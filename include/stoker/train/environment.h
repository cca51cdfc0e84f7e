// The environment variables that change a Trainer's run, read in this one place (nowhere else
// in the library reads them), so that `stoker doctor` can diagnose a program built on the
// Trainer without changing it:
//   STOKER_DIAG=1                   TrainerOptions::diagnostics.enabled
//   STOKER_DIAG_REPORT_JSON=path    diagnostics.report_json
//   STOKER_DIAG_TRACE=path          diagnostics.trace_path
//   STOKER_DIAG_BASELINE_SAVE=path  diagnostics.baseline_save
//   STOKER_DIAG_BASELINE_COMPARE=p  diagnostics.baseline_compare
//   STOKER_DIAG_HTML=path           diagnostics.html_report
//   STOKER_DIAG_TIMELINE_CSV=path   diagnostics.timeline_csv
//   STOKER_DIAG_GPU_CSV=path        diagnostics.gpu_csv
//   STOKER_DIAG_INTERVAL=N          diagnostics.report_interval
//   STOKER_DIAG_WARMUP=N            diagnostics.warmup_steps
//   STOKER_DIAG_MONITOR=0           diagnostics.monitor
//   STOKER_DIAG_MONITOR_PCIE=0      diagnostics.monitor_pcie
//   STOKER_DIAG_DEVICE_TIMING=0     diagnostics.device_timing
//   STOKER_DIAG_OPS=N               diagnostics.op_timing_interval
//   STOKER_DIAG_MAX_STEPS=N         TrainerOptions::max_steps (the smaller of the two)
//   STOKER_DIAG_SYNTHETIC=1         TrainerOptions::replay_first_batch
// The Trainer reads none of them: a program that lets itself be steered passes its options
// through apply_environment before it builds the Trainer (the bundled programs all do).
#pragma once

#include "stoker/train/trainer.h"

namespace stoker::train {

// `options` with the variables above applied; throws naming the variable when a value is
// malformed (a flag that is not 0/1, a number that is not an integer or is negative).
TrainerOptions apply_environment(TrainerOptions options);

}  // namespace stoker::train
