// Where a training run's memory goes: a report by category, and ranked advice for when it does
// not fit.
//
// The Trainer builds one on request (Trainer::memory_report), prints it at the end of its first
// fit() step, and installs it as the allocator's out-of-memory hook (core/allocator.h), so a
// CUDA out-of-memory error carries the report and the advice. Categories are bytes of live
// tensors as the allocators count them (core::memory_stats), on the model's device:
//   parameters       fp32 master values
//   compute_copies   their half copies under mixed precision
//   gradients        fp32 gradients (bucket views under data parallelism count once)
//   optimizer_state  Optimizer::state_bytes (moments, momentum, 8-bit codes and scales) held
//                    on the device; state elsewhere (optim::OffloadedOptimizer keeps it in host
//                    memory) is optimizer_state_host, shown but not counted
//   input_batch      the last micro-batch the Trainer consumed (input and target; shown for
//                    scale, not counted in persistent(): it may be a view of a dataset)
//   activations_peak the first step's peak above what was still held after it: activations
//                    and temporaries of forward/backward (0 until a step ran)
//   loader_pinned    pinned host bytes in use (the data loader's ring; host memory)
//   workspaces       library workspaces outside the allocator (cuBLASLt, cuDNN): not tracked
//                    yet, reported as 0
// `unattributed()` is the allocator's current bytes minus the categories that persist between
// steps (parameters, compute copies, gradients, optimizer state): what nobody above claims (the
// user's own tensors such as a dataset, the loss's saved prediction, small trainer state).
// Plain data; the functions are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "stoker/core/allocator.h"
#include "stoker/core/device.h"

namespace stoker::train {

struct MemoryReport {
  Device device;
  size_t parameters = 0;
  size_t compute_copies = 0;
  size_t gradients = 0;
  size_t optimizer_state = 0;
  size_t optimizer_state_host = 0;  // offloaded optimizer state (host memory; not in persistent())
  size_t input_batch = 0;
  size_t activations_peak = 0;
  size_t loader_pinned = 0;
  size_t workspaces = 0;
  core::MemoryStats allocator;  // memory_stats(device) when the report was made

  // What the run holds between steps (the categories that count in allocator.current_bytes).
  // The input batch is left out: it may be a view of the user's dataset, or already freed.
  size_t persistent() const { return parameters + compute_copies + gradients + optimizer_state; }
  // allocator.current_bytes - persistent() (negative if the categories overcount).
  int64_t unattributed() const {
    return static_cast<int64_t>(allocator.current_bytes) - static_cast<int64_t>(persistent());
  }
};

// What the run could change to need less memory, with the bytes it would roughly save.
struct MemoryAdvice {
  std::string action;  // "enable activation checkpointing (TrainerOptions::...)"
  size_t saves_bytes;  // estimate
};

// The setting the advice depends on (what is already on is not advised again).
struct MemorySettings {
  bool mixed_precision = false;  // bf16/fp16 compute
  bool activation_checkpointing = false;
  bool low_precision_optimizer_state = false;
  int grad_accum_steps = 1;
};

// Advice ranked by estimated savings, largest first: activation checkpointing (about half the
// activations), halving the micro-batch with twice the accumulation (half the activations and
// batch), bf16 compute (half the activations), 8-bit optimizer state (about 72 % of it), on a
// GPU offloading the optimizer state to the CPU (all of it, for step time).
std::vector<MemoryAdvice> memory_advice(const MemoryReport& r, const MemorySettings& s);

// A multi-line table: one line per category with bytes and share of the allocator's current
// bytes, the allocator's current/peak/reserved, and the unattributed rest.
std::string format_memory_report(const MemoryReport& r);
// "1. enable ... (saves ~1.2 GiB)" lines.
std::string format_memory_advice(const std::vector<MemoryAdvice>& advice);

}  // namespace stoker::train
