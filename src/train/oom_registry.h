// Private to the Trainer: the live Trainers behind the allocator's out-of-memory hook, so that a
// CUDA out-of-memory error carries the newest Trainer's memory report for that device and
// ranked advice (train/memory_report.h). The hook is installed while at least one Trainer
// lives; the allocator stays ignorant of the train layer (docs/architecture.md#layers).
// Thread-safe (one mutex).
#pragma once

namespace stoker::train {

class Trainer;

void register_trainer(const Trainer* trainer);
void unregister_trainer(const Trainer* trainer);

}  // namespace stoker::train
