
#include <fmt/format.h>
#include <algorithm>
#include <cstdio>

#include "stoker/core/allocator.h"
#include "stoker/core/error.h"
#include "stoker/train/trainer.h"
#include "train/trainer_impl.h"

namespace stoker::train {

std::vector<MemoryAdvice> memory_advice(const MemoryReport& r, const MemorySettings& s) {
  std::vector<MemoryAdvice> out;
  // Estimates, stated in the header: what each change removes from the peak, roughly.
  if (!s.activation_checkpointing && r.activations_peak > 0)
    out.push_back(
        {"enable activation checkpointing (TrainerOptions::activation_checkpoint_every "
         "= 2, and selective_recompute = true)",
         r.activations_peak / 2});
  if (r.activations_peak > 0 || r.input_batch > 0)
    out.push_back({fmt::format("halve the micro-batch and double gradient accumulation "
                               "(TrainerOptions::grad_accum_steps = {}): the same update",
                               2 * s.grad_accum_steps),
                   (r.activations_peak + r.input_batch) / 2});
  if (!s.mixed_precision && r.activations_peak > 0)
    out.push_back(
        {"train in bf16 (TrainerOptions::precision = Precision::bf16): half-size "
         "activations, fp32 master weights kept",
         r.activations_peak / 2});
  if (!s.low_precision_optimizer_state && r.optimizer_state > 0)
    out.push_back(
        {"store optimizer state in 8 bits (AdamWOptions::state = {.dtype = "
         "StateDType::int8_blockwise}; bf16 halves it instead)",
         r.optimizer_state / 100 * 72});
  // On a GPU the whole state can leave the device (for step time: host copies, a CPU update).
  if (r.device.is_cuda() && r.optimizer_state > 0)
    out.push_back(
        {"offload the optimizer state and update to the CPU (optim::OffloadedOptimizer around "
         "the optimizer; costs step time for the copies and the CPU update)",
         r.optimizer_state});
  std::stable_sort(out.begin(), out.end(), [](const MemoryAdvice& a, const MemoryAdvice& b) {
    return a.saves_bytes > b.saves_bytes;
  });
  return out;
}

std::string format_memory_report(const MemoryReport& r) {
  const double current = static_cast<double>(std::max<size_t>(1, r.allocator.current_bytes));
  std::string out = fmt::format("memory on {}:\n", r.device.str());
  auto line = [&](const char* name, size_t bytes, const char* note) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "  %-18s %12s  %5.1f %%  %s\n", name,
                  core::format_bytes(bytes).c_str(), 100.0 * static_cast<double>(bytes) / current,
                  note);
    out += buf;
  };
  line("parameters", r.parameters, "fp32 master weights");
  line("compute copies", r.compute_copies, "half copies (mixed precision)");
  line("gradients", r.gradients, "fp32");
  line("optimizer state", r.optimizer_state, "");
  if (r.optimizer_state_host > 0)
    out += fmt::format(
        "  optimizer state offloaded to host memory {} (not on the device; its pinned copies of "
        "values and gradients are in the pinned bytes below)\n",
        core::format_bytes(r.optimizer_state_host));
  line("input batch", r.input_batch, "last batch on the device");
  const int64_t rest = r.unattributed();
  line("unattributed", static_cast<size_t>(std::max<int64_t>(0, rest)),
       rest < 0 ? "(categories exceed the allocator's count)" : "other live tensors");
  line("activations (peak)", r.activations_peak, "above the persistent bytes, first step");
  out += fmt::format("  allocator: current {}, peak {}, reserved {}\n",
                     core::format_bytes(r.allocator.current_bytes),
                     core::format_bytes(r.allocator.peak_bytes),
                     core::format_bytes(r.allocator.reserved_bytes));
  out += fmt::format(
      "  pinned host memory (loader ring, optimizer offload) {}; library workspaces (cuBLASLt, "
      "cuDNN) not tracked\n",
      core::format_bytes(r.loader_pinned));
  return out;
}

std::string format_memory_advice(const std::vector<MemoryAdvice>& advice) {
  std::string out;
  for (size_t i = 0; i < advice.size(); ++i)
    out += fmt::format("  {}. {} (saves ~{})\n", i + 1, advice[i].action,
                       core::format_bytes(advice[i].saves_bytes));
  return out;
}

// The Trainer's report (train/trainer.h): what it holds, and the first step's activation peak.
MemorySettings Trainer::Impl::memory_settings() const {
  return {
      .mixed_precision = options_.precision != amp::Precision::fp32,
      .activation_checkpointing = options_.activation_checkpoint_every > 0,
      .low_precision_optimizer_state = optimizer_.state_format().dtype != optim::StateDType::f32,
      .grad_accum_steps = options_.grad_accum_steps};
}

MemoryReport Trainer::Impl::memory_report() const {
  MemoryReport r;
  r.device = model_.device();
  for (const nn::Parameter* p : params_) {
    r.parameters += p->value().nbytes();
    if (p->compute_copy().defined()) r.compute_copies += p->compute_copy().nbytes();
    // The gradient is f32 of the value's shape (read without grad(), which may clear it).
    if (p->requires_grad) r.gradients += p->value().nbytes();
  }
  // By where the state lives: an offloaded optimizer's is host memory, not the device's.
  optimizer_.flush();  // nothing may still be writing the state read below
  for (const auto& [name, t] : optimizer_.state())
    (t.device() == r.device ? r.optimizer_state : r.optimizer_state_host) += t.nbytes();
  r.input_batch = last_batch_bytes_;
  r.activations_peak = activations_peak_;
  r.loader_pinned = core::pinned_memory_stats().current_bytes;
  r.allocator = core::memory_stats(r.device);
  return r;
}

bool Trainer::Impl::begin_memory_measure() {
  if (memory_measured_) return false;
  core::reset_peak_memory(model_.device());
  return true;
}

void Trainer::Impl::end_memory_measure(bool measuring) {
  if (!measuring) return;
  const core::MemoryStats st = core::memory_stats(model_.device());
  activations_peak_ = st.peak_bytes > st.current_bytes ? st.peak_bytes - st.current_bytes : 0;
  memory_measured_ = true;
}

}  // namespace stoker::train
