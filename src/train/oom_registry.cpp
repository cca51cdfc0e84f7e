#include "train/oom_registry.h"

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "stoker/core/allocator.h"
#include "stoker/train/trainer.h"

namespace stoker::train {

namespace {

// The live Trainers, newest last.
std::mutex g_trainers_mu;
std::vector<const Trainer*> g_trainers;
core::OutOfMemoryHook g_previous_hook;

std::string trainer_oom_context(Device device) {
  std::lock_guard<std::mutex> lock(g_trainers_mu);
  for (auto it = g_trainers.rbegin(); it != g_trainers.rend(); ++it) {
    const MemoryReport r = (*it)->memory_report();
    if (r.device != device) continue;
    const auto advice = memory_advice(r, (*it)->memory_settings());
    return format_memory_report(r) +
           (advice.empty() ? std::string()
                           : "ways to need less memory:\n" + format_memory_advice(advice));
  }
  return {};
}

}  // namespace

void register_trainer(const Trainer* t) {
  std::lock_guard<std::mutex> lock(g_trainers_mu);
  if (g_trainers.empty()) g_previous_hook = core::set_out_of_memory_hook(trainer_oom_context);
  g_trainers.push_back(t);
}

void unregister_trainer(const Trainer* t) {
  std::lock_guard<std::mutex> lock(g_trainers_mu);
  g_trainers.erase(std::remove(g_trainers.begin(), g_trainers.end(), t), g_trainers.end());
  if (g_trainers.empty()) core::set_out_of_memory_hook(std::move(g_previous_hook));
}

}  // namespace stoker::train
